#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use serde_json::Value as JsonValue;

use super::describe::operation_id;
use super::schemas::{MEDIA_TYPE, TASK_STATES};
use super::*;

fn routes_of(document: &JsonValue) -> BTreeSet<(String, String)> {
    document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect()
}

#[test]
fn each_variant_has_its_own_document() {
    for (index, variant) in Variant::ALL.into_iter().enumerate() {
        assert_eq!(variant.index(), index, "{variant:?}");
    }
}

#[test]
fn the_document_describes_exactly_the_served_routes() {
    let served: BTreeSet<(String, String)> = crate::server::served_routes()
        .into_iter()
        .map(|(method, path)| (method.as_str().to_lowercase(), path.to_owned()))
        .collect();
    for variant in Variant::ALL {
        let documented = routes_of(variant.document());
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty(),
            "served, not documented: {undocumented:?}"
        );
        assert!(unserved.is_empty(), "documented, not served: {unserved:?}");
    }
    assert_eq!(
        served.len(),
        OPERATIONS.len(),
        "no operation is listed twice"
    );
}

/// Every `$ref` names a component, including those inside the config
/// namespaces' schemas.
#[test]
fn every_reference_resolves_and_ids_are_unique() {
    fn references<'a>(value: &'a JsonValue, into: &mut Vec<&'a str>) {
        match value {
            JsonValue::Object(fields) => {
                for (key, value) in fields {
                    match value {
                        JsonValue::String(target) if key == "$ref" => into.push(target),
                        other => references(other, into),
                    }
                }
            }
            JsonValue::Array(items) => items.iter().for_each(|item| references(item, into)),
            _ => {}
        }
    }
    let document = Variant::new(Security::Keys, false).document();
    let mut found = Vec::new();
    references(document, &mut found);
    assert!(found.len() > 50, "{}", found.len());
    for target in found {
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{target} points outside the components"));
        assert!(
            document["components"]["schemas"].get(name).is_some(),
            "{target} does not resolve"
        );
    }
    let ids: BTreeSet<String> = OPERATIONS
        .iter()
        .map(|op| operation_id(op.method, op.path))
        .collect();
    assert_eq!(ids.len(), OPERATIONS.len());
}

#[test]
fn keys_are_declared_only_where_the_node_checks_them() {
    let open = Variant::new(Security::Open, false).document();
    assert!(open.get("security").is_none());
    assert!(open["components"].get("securitySchemes").is_none());
    assert!(!open.to_string().contains("\"401\""));

    let keyed = Variant::new(Security::Keys, false).document();
    assert_eq!(keyed["security"][0]["bearer"], serde_json::json!([]));
    for (path, public) in [
        ("/health", true),
        ("/v1/a2a/{tenant}/.well-known/agent-card.json", true),
        ("/metrics", false),
        ("/v1/threads", false),
    ] {
        let operation = &keyed["paths"][path]["get"];
        assert_eq!(
            operation.get("security") == Some(&serde_json::json!([])),
            public,
            "{path}"
        );
        assert_eq!(
            operation["responses"].get("401").is_some(),
            !public,
            "{path}"
        );
    }
}

#[test]
fn links_lead_from_a_created_thread_to_the_thread_routes() {
    let document = Variant::new(Security::Open, false).document();
    let links = &document["paths"]["/v1/threads"]["post"]["responses"]["201"]["links"];
    let target = operation_id("get", "/v1/threads/{thread_id}");
    assert_eq!(links[&target]["operationId"], target.as_str());
    assert_eq!(
        links[&target]["parameters"]["thread_id"],
        "$response.body#/id"
    );
    let ids: BTreeSet<String> = OPERATIONS
        .iter()
        .map(|op| operation_id(op.method, op.path))
        .collect();
    for link in links.as_object().unwrap().values() {
        assert!(ids.contains(link["operationId"].as_str().unwrap()));
    }
}

#[test]
fn the_task_states_are_the_wire_names() {
    for state in TASK_STATES {
        let parsed: Result<crate::protocols::a2a::wire::TaskState, _> =
            serde_json::from_value(JsonValue::String(state.to_owned()));
        assert!(parsed.is_ok(), "{state}");
    }
}

/// The patterns the document gives clients agree with the checks the server
/// makes, on the edges of each.
#[test]
fn the_id_and_media_type_patterns_are_the_servers_checks() {
    let id = regex::Regex::new(awaken_actors::ID_PATTERN).unwrap();
    for (text, valid) in [
        ("thread-1", true),
        ("é ü", true),
        ("a\u{7f}b", false),
        ("a\u{85}b", false),
        ("a\tb", false),
    ] {
        assert_eq!(id.is_match(text), valid, "{text:?}");
        assert_eq!(
            awaken_actors::ThreadId::new(text).is_ok(),
            valid,
            "{text:?}"
        );
    }
    let media = regex::Regex::new(MEDIA_TYPE).unwrap();
    for (text, valid) in [
        ("image/png", true),
        ("image/", true),
        ("image/p ng", false),
        ("image/pñg", false),
        ("text/html", false),
    ] {
        assert_eq!(media.is_match(text), valid, "{text:?}");
        let checked = crate::runs::input::check_image(None, Some("iVBORw0KGgo="), Some(text));
        assert_eq!(checked.is_ok(), valid, "{text:?}");
    }
}

#[test]
fn a_node_without_a_default_agent_requires_runs_to_name_one() {
    for (default_agent, required) in [(false, true), (true, false)] {
        let document = Variant::new(Security::Open, default_agent).document();
        for body in ["StartRun", "Input"] {
            let names = document["components"]["schemas"][body]["required"].to_string();
            assert_eq!(names.contains("agentId"), required, "{body}: {names}");
        }
    }
}
