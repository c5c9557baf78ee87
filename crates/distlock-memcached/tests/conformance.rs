//! The conformance suite against a real `memcached` started by the harness.

mod support;

distlock_conformance::conformance_tests!(support::fixture);
