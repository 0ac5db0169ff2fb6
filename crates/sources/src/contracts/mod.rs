//! External tools by contract: a team registers its existing HTTP APIs as tools without touching
//! them, and the service enforces their contracts.
//!
//! - [`schema`]: the YAML contract of a tool — name, endpoint, method, `contract_version`,
//!   timeout, and input and output fields with type, description, semantic tag, default, enum,
//!   bounds and group.
//! - [`tags`]: the semantic-tag dictionary, the only tags a contract may use.
//! - [`registry`]: the contracts of a directory, the fallback map and the endpoint allow-list.
//! - [`call`]: a call — arguments checked and `{{tag}}`s filled from the task, the request sent
//!   with a timeout, the reply checked (a missing tag or another `contract_version` is an error
//!   at once) and filtered by `expected_output_tags`; evidence items read from a reply.

pub mod call;
pub mod registry;
pub mod schema;
pub mod tags;

pub use call::{CallError, EvidenceItem, Reply, TaskContext};
pub use registry::{EndpointAllowList, Registry, RegistryError, StoredExtras, check_dir};
pub use schema::{
    Contract, ContractLimits, ContractProblem, Field, FieldType, Method, valid_tool_name,
};
pub use tags::TagDictionary;
