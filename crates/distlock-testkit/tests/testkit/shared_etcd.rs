//! The shared etcd member and 3-member cluster of a test binary: started once, reached through
//! `shared::etcd_url` and `shared::etcd_cluster_url` (or the `DISTLOCK_TEST_ETCD*_URL` the user
//! set), and serving through every member.

use distlock_testkit::{etcdctl, shared};

/// `http://host:port,...`, the `etcdctl --endpoints` of an `etcd://` URL.
fn endpoints(url: &str) -> String {
    let hosts = url.strip_prefix("etcd://").expect("an etcd:// URL");
    hosts
        .split(',')
        .map(|host| format!("http://{host}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn the_shared_member_is_started_once_and_serves() {
    let first = shared::etcd().expect("the shared etcd starts (run scripts/install-test-deps)");
    let second = shared::etcd().expect("the shared etcd");
    assert!(std::ptr::eq(first, second), "one member per test binary");
    let url = shared::etcd_url().expect("its URL");
    if std::env::var_os(shared::ETCD_URL_ENV).is_none() {
        assert_eq!(url, first.url());
    }
    let out = etcdctl(&endpoints(&url), &["put", "shared-member", "yes"]).expect("etcdctl put");
    assert_eq!(out.trim(), "OK");
}

#[test]
fn the_shared_cluster_is_started_once_and_replicates() {
    let first =
        shared::etcd_cluster().expect("the shared etcd cluster starts (run scripts/install-test-deps)");
    let second = shared::etcd_cluster().expect("the shared etcd cluster");
    assert!(std::ptr::eq(first, second), "one cluster per test binary");
    let url = shared::etcd_cluster_url().expect("its URL");
    if std::env::var_os(shared::ETCD_CLUSTER_URL_ENV).is_some() {
        return;
    }
    assert_eq!(url, first.url());
    assert_eq!(url.split(',').count(), 3, "every member is in the URL: {url}");
    // Written through one member, read (linearizably) through each other.
    let out = etcdctl(&first.node(0).endpoint(), &["put", "shared-cluster", "yes"]).expect("etcdctl put");
    assert_eq!(out.trim(), "OK");
    for member in 1..3 {
        let read = etcdctl(
            &first.node(member).endpoint(),
            &["get", "shared-cluster", "--print-value-only"],
        )
        .expect("etcdctl get");
        assert_eq!(read.trim(), "yes", "member {member} serves the write");
    }
}
