//! Tool arguments and tool contracts come from clients and teams: reading them must refuse what
//! is wrong, never panic.
#![no_main]

use serde_json::Value;
use sources::contracts::{Contract, TagDictionary, call};

const CONTRACT: &str = r#"
name: kb_search
description: Searches a knowledge base.
endpoint: http://127.0.0.1:9/search
contract_version: "1"
input_schema:
  query: { type: string, semantic_tag: search_query, min: 1, max: 200 }
  top_k: { type: integer, default: 3, min: 1, max: 10 }
  filters:
    type: array
    required: false
    items: { type: string, enum: [a, b] }
output_schema:
  results:
    type: array
    items:
      type: object
      properties:
        text: { type: string, semantic_tag: evidence_content }
"#;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match selector % 3 {
        // The arguments of every built-in tool.
        0 => {
            if let Ok(value) = serde_json::from_str::<Value>(text) {
                let _ = service::args::parse_for_tool("research_open_task", &value);
                for spec in service::tool_specs() {
                    let _ = service::args::parse_for_tool(&spec.name, &value);
                }
            }
        }
        // A registered tool's arguments, checked against its contract.
        1 => {
            if let (Ok(value), Ok(contract)) = (
                serde_json::from_str::<Value>(text),
                Contract::parse(CONTRACT, None),
            ) && let Value::Object(map) = value
            {
                let _ = call::prepare_arguments(&contract, &map, None, &TagDictionary::default());
            }
        }
        // A contract's YAML, and its check.
        _ => {
            if let Ok(contract) = Contract::parse(text, None) {
                let _ = contract.problems(
                    &TagDictionary::default(),
                    &sources::contracts::ContractLimits::default(),
                    None,
                );
                let _ = call::sample_arguments(&contract);
            }
        }
    }
});
