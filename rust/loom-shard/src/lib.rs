//! The lock-free shard of frazil-native's hot buffer, compiled on its own with loom's atomics so
//! that `cargo test -p frazil-shard-loom` model-checks it (`make test-loom`).

#[allow(dead_code)]
#[path = "../../src/buffer/shard.rs"]
mod shard;
