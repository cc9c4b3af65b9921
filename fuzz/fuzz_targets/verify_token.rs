//! Fuzzes the token parser and verifier: any string must be answered (accepted or refused)
//! without panicking, and a string the verifier accepts must re-mint to an equivalent token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_links::{KeyRing, TokenError};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let ring = KeyRing::new([("k1", vec![7u8; 32]), ("k0", vec![8u8; 32])]).unwrap();
    // Also feed a mutation of a real token, so the fuzzer reaches the MAC and decode paths.
    let real = ring.mint(stowage_links::Operation::Read, "art_1", &Default::default(), 4_000_000_000);
    for candidate in [s.to_owned(), format!("{real}{s}"), format!("v1.k1.{s}")] {
        match ring.verify(&candidate, 1_800_000_000) {
            Ok(claims) => {
                let again = ring.mint(claims.operation, &claims.target, &claims.owner, claims.expires_at);
                assert!(ring.verify(&again, 1_800_000_000).is_ok());
            }
            Err(TokenError::NotAToken | TokenError::Forbidden | TokenError::Expired { .. } | TokenError::Missing) => {}
        }
    }
});
