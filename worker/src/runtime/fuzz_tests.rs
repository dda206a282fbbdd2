//! Fuzz target (`bolero::check!`) for what the worker decodes from its coordinator: a
//! `CoordinatorMessage` off the Dispatch stream, its Welcome's term and every Assign mapped to an
//! item (trace contexts and reasons included) and run through the ledger. Under `cargo test` it runs
//! its corpus and a few hundred random inputs; under `cargo bolero test` it runs coverage-guided
//! (README: Tests).
//!
//! Contracts checked: no input panics; at most one item per (controller, key) runs at a time; every
//! started item finishes once and, when all have, the ledger holds nothing.

use std::collections::{HashMap, HashSet};

use flotilla_proto as proto;
use prost::Message;

use super::ledger::{Admission, Assigned, Ledger};

#[test]
fn coordinator_messages() {
    bolero::check!()
        .with_iterations(500)
        .for_each(|bytes: &[u8]| {
            use proto::coordinator_message::Msg;
            let Ok(message) = proto::CoordinatorMessage::decode(bytes) else {
                return;
            };
            let mut ledger = Ledger::new(HashMap::from([("c".into(), 2), (String::new(), 1)]));
            let items = match message.msg {
                Some(Msg::Welcome(welcome)) => {
                    ledger.observe_term(welcome.term);
                    assert_eq!(ledger.known_term(), welcome.term);
                    return;
                }
                Some(Msg::Assign(batch)) => batch.items,
                Some(Msg::Revoke(_)) | None => return,
            };
            let mut running: Vec<Assigned> = Vec::new();
            let mut slots = HashSet::new();
            for item in items {
                let term = item.term;
                match ledger.admit(Assigned::from(item), false) {
                    Admission::Start(item) => {
                        assert!(item.term >= term);
                        assert!(
                            slots.insert((item.controller.clone(), item.key.clone())),
                            "two items of one key run at once"
                        );
                        running.push(*item);
                    }
                    Admission::Queued | Admission::Refused(_) => {}
                }
            }
            let held = ledger.held().len();
            let mut finished = 0;
            while let Some(item) = running.pop() {
                let (was_held, next) =
                    ledger.finish(&item.controller, &item.key, item.term, item.item_id);
                assert!(was_held, "a running item was not held");
                finished += 1;
                match next {
                    Some(next) => {
                        assert_eq!((&next.controller, &next.key), (&item.controller, &item.key));
                        running.push(next);
                    }
                    None => {
                        slots.remove(&(item.controller.clone(), item.key.clone()));
                    }
                }
            }
            assert_eq!(finished, held, "every held item runs once");
            assert_eq!(ledger.running(), 0);
            assert!(ledger.held().is_empty() && slots.is_empty());
        });
}
