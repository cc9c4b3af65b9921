//! Mint and verify cost of one link token (target: at most 2 µs each; BENCHMARKS.md, "Signed
//! links and downloads").
use criterion::{Criterion, criterion_group, criterion_main};
use stowage_core::Owner;
use stowage_links::{KeyRing, Operation};

fn tokens(c: &mut Criterion) {
    let ring = KeyRing::new([("k2", vec![7u8; 32]), ("k1", vec![9u8; 32])]).unwrap();
    let owner = Owner {
        tenant_id: Some("acme".into()),
        user_id: Some("user-42".into()),
        session_id: Some("4b1c6d1e-92f0-4f5e-a1d2-0c9e8f7a6b5c".into()),
    };
    let id = "tableau_3f2a9c0d1e4b5a69";
    let exp = 4_000_000_000;
    c.bench_function("mint", |b| b.iter(|| ring.mint(Operation::Read, std::hint::black_box(id), &owner, exp)));
    let token = ring.mint(Operation::Read, id, &owner, exp);
    c.bench_function("verify", |b| b.iter(|| ring.verify_for(std::hint::black_box(&token), Operation::Read, id, 1_800_000_000).unwrap()));
}

criterion_group!(benches, tokens);
criterion_main!(benches);
