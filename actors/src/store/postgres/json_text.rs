//! [`JsonText`]: a record sent to PostgreSQL as `json`, not `jsonb`.
//!
//! sqlx's `Json<T>` declares its parameters `jsonb`, so the server parses every
//! record it is sent into `jsonb`'s tree, even for a `json` column. The store's
//! records are only ever read back whole, so it stores them as `json` (text the
//! server checks and keeps as sent) and declares the checkpoint's parameters so
//! (decision 0080). Into a table created by an earlier version, with `jsonb`
//! columns, PostgreSQL converts them on assignment.

use serde::Serialize;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo};
use sqlx::{Encode, Postgres, Type};

use crate::error::StorageError;

/// PostgreSQL's type id of `json`.
const JSON: Oid = Oid(114);
/// PostgreSQL's type id of `json[]`.
const JSON_ARRAY: Oid = Oid(199);

/// `T` serialized as a `json` parameter.
#[derive(Debug, Clone, Copy)]
pub(super) struct JsonText<T>(pub(super) T);

impl<T> Type<Postgres> for JsonText<T> {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(JSON)
    }
}

impl<T> PgHasArrayType for JsonText<T> {
    fn array_type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(JSON_ARRAY)
    }
}

impl<T: Serialize> Encode<'_, Postgres> for JsonText<T> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        // `json`'s binary form is its text.
        serde_json::to_writer(&mut **buf, &self.0)?;
        Ok(IsNull::No)
    }
}

/// A record serialized ahead of its statement, sent as a `json` parameter: a
/// batch's checkpoints are encoded one by one, so one that cannot be is refused
/// alone instead of failing the statement of every checkpoint beside it.
#[derive(Debug, Clone)]
pub(super) struct EncodedJson(String);

impl EncodedJson {
    /// `value` serialized, or why it cannot be.
    pub(super) fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, StorageError> {
        serde_json::to_string(value)
            .map(Self)
            .map_err(|err| StorageError::Serialization(err.to_string()))
    }
}

impl Type<Postgres> for EncodedJson {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(JSON)
    }
}

impl PgHasArrayType for EncodedJson {
    fn array_type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(JSON_ARRAY)
    }
}

impl Encode<'_, Postgres> for EncodedJson {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }
}
