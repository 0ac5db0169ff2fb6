//! Inputs that once crashed (or were written to probe) the fuzz targets of bundle checking and
//! tool arguments, replayed on every test run: each is refused or accepted, never a panic.

use std::path::PathBuf;

use serde_json::Value;
use sources::contracts::{Contract, ContractLimits, TagDictionary, call};

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(!out.is_empty(), "no inputs in {}", dir.display());
    out
}

#[test]
fn bundle_inputs_never_verify_and_never_panic() {
    for data in inputs("bundle") {
        if let Ok(text) = std::str::from_utf8(&data) {
            assert!(service::audit::verify_bundle_text(text, 1 << 20, None).is_err());
        }
    }
}

#[test]
fn tool_argument_inputs_are_refused_or_accepted() {
    for data in inputs("tool_arguments") {
        let Some((&selector, rest)) = data.split_first() else {
            continue;
        };
        let Ok(text) = std::str::from_utf8(rest) else {
            continue;
        };
        match selector % 3 {
            0 => {
                if let Ok(value) = serde_json::from_str::<Value>(text) {
                    for spec in service::tool_specs() {
                        let _ = service::args::parse_for_tool(&spec.name, &value);
                    }
                }
            }
            1 => {
                let contract = Contract::parse(
                    "name: t\ndescription: d\nendpoint: http://127.0.0.1:9/s\ncontract_version: \"1\"\ninput_schema:\n  query: { type: string }\n  top_k: { type: integer, default: 3, max: 10 }\n",
                    None,
                )
                .unwrap();
                if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) {
                    let _ =
                        call::prepare_arguments(&contract, &map, None, &TagDictionary::default());
                }
            }
            _ => {
                if let Ok(contract) = Contract::parse(text, None) {
                    let _ = contract.problems(
                        &TagDictionary::default(),
                        &ContractLimits::default(),
                        None,
                    );
                }
            }
        }
    }
}
