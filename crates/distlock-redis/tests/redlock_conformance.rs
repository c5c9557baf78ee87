//! The conformance suite against Redlock over 3 and over 5 real `redis-server`s.

mod support;

mod three {
    distlock_conformance::conformance_tests!(crate::support::redlock3);
}

mod five {
    distlock_conformance::conformance_tests!(crate::support::redlock5);
}
