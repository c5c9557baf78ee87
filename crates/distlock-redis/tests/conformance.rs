//! The conformance suite against one real `redis-server`.

mod support;

distlock_conformance::conformance_tests!(support::single);
