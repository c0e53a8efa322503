//! MessagePack codec for every wire type.
