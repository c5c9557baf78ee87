//! A saved run checked again offline (`--check FILE`), and the picture a run draws
//! (`--picture FILE`): no store, no clients.

use std::process::Command;

use serde_json::json;

const BINARY: &str = env!("CARGO_BIN_EXE_distlock-torture");
const MS: u64 = 1_000_000;

/// A saved run of two holders of `hot` at once, both granted after a holder kill.
fn saved_run() -> serde_json::Value {
    let hold = |client: u32, grant: &str, token: u64, from: u64, until: u64| {
        vec![
            json!({"at": from - MS, "client": client, "event": {"op": "acquire_invoked", "name": "hot"}}),
            json!({"at": from, "client": client, "event": {"op": "granted", "name": "hot", "grant": grant, "token": token, "kind": "exclusive"}}),
            json!({"at": until, "client": client, "event": {"op": "affirmed", "grant": grant}}),
            json!({"at": until + MS, "client": client, "event": {"op": "release_invoked", "grant": grant, "believed": true}}),
        ]
    };
    let mut events = hold(1, "1.0.1", 1, 100 * MS, 300 * MS);
    events.extend(hold(2, "2.0.1", 2, 200 * MS, 400 * MS));
    events.extend(hold(3, "3.0.1", 3, 500 * MS, 600 * MS));
    json!({
        "backend": "sqlite",
        "seed": 7,
        "ttl_ms": 1000,
        "fencing": "Monotonic",
        "primitive": "mutex",
        "permits": null,
        "broken": null,
        "workload": "hand-made",
        "judgement": {
            "monotonic_fencing": true,
            "documented_losses": [],
            "hot": "hot",
            "recovery_bound": 8000 * MS,
            "kinds": ["holder-kill"],
            "permits": 2
        },
        "left_held": [],
        "crashed": [],
        "history": {
            "events": events,
            "writes": [],
            "faults": [{"kind": "holder-kill", "target": "client 0", "start": 50 * MS, "end": 60 * MS, "injected": true}],
            "kills": [],
            "started": 0,
            "stopped": 1000 * MS
        }
    })
}

#[test]
fn a_saved_run_is_checked_again_offline_and_drawn() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let saved = dir.path().join("run.json");
    std::fs::write(&saved, saved_run().to_string()).expect("written");
    let (json, picture) = (dir.path().join("out.json"), dir.path().join("run.svg"));
    let output = Command::new(BINARY)
        .arg("--check")
        .arg(&saved)
        .arg("--json")
        .arg(&json)
        .arg("--picture")
        .arg(&picture)
        .output()
        .expect("the harness runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("the JSON results")).expect("JSON");
    let findings = results[0]["verdict"]["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        findings
            .iter()
            .any(|f| f["kind"] == "exclusion" && f["documented"] == false),
        "{findings:?}"
    );
    let svg = std::fs::read_to_string(&picture).expect("the picture");
    assert!(svg.starts_with("<svg"), "{svg}");
    for shown in ["hot", "holder-kill", "2.0.1", "recovery"] {
        assert!(svg.contains(shown), "the picture does not show {shown}");
    }
}

#[test]
fn a_file_that_is_not_a_saved_run_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let saved = dir.path().join("run.json");
    std::fs::write(&saved, "{\"events\": []}").expect("written");
    let output = Command::new(BINARY)
        .arg("--check")
        .arg(&saved)
        .output()
        .expect("the harness runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a saved run"), "{stderr}");
}
