//! Profiles: values by namespace and key.

use super::*;

/// Values are stored per namespace and key, replaced by `put`, removed by `delete`.
pub async fn profile_get_put_delete<S: ProfileStore + ?Sized>(store: &S) {
    assert_eq!(store.get("locale", "alice").await.unwrap(), None);
    store.put("locale", "alice", json!("en-US")).await.unwrap();
    assert_eq!(
        store.get("locale", "alice").await.unwrap(),
        Some(json!("en-US"))
    );
    store
        .put("locale", "alice", json!({"lang": "nb", "region": "NO"}))
        .await
        .unwrap();
    assert_eq!(
        store.get("locale", "alice").await.unwrap(),
        Some(json!({"lang": "nb", "region": "NO"}))
    );
    assert_eq!(store.get("locale", "bob").await.unwrap(), None);
    assert_eq!(store.get("theme", "alice").await.unwrap(), None);

    store.put("theme", "alice", json!([1, 2, 3])).await.unwrap();
    store.delete("locale", "alice").await.unwrap();
    assert_eq!(store.get("locale", "alice").await.unwrap(), None);
    assert_eq!(
        store.get("theme", "alice").await.unwrap(),
        Some(json!([1, 2, 3]))
    );
    store
        .delete("locale", "alice")
        .await
        .expect("deleting an absent value is not an error");
}

/// Namespaces and keys with separators, spaces and unicode round-trip.
pub async fn profile_odd_keys_round_trip<S: ProfileStore + ?Sized>(store: &S) {
    let keys = [
        ("shared", "global"),
        ("shared", "parent_thread::t1"),
        ("agent type ✓", "ünïcødé key 🚀"),
        ("ns", "quote'and\"double"),
    ];
    for (i, (namespace, key)) in keys.iter().enumerate() {
        store.put(namespace, key, json!({"i": i})).await.unwrap();
    }
    for (i, (namespace, key)) in keys.iter().enumerate() {
        assert_eq!(
            store.get(namespace, key).await.unwrap(),
            Some(json!({"i": i}))
        );
        store.delete(namespace, key).await.unwrap();
        assert_eq!(store.get(namespace, key).await.unwrap(), None);
    }
}
