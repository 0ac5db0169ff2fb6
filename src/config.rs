//! `research-ledger.toml`: settings in a file, beneath environment variables and flags.
//!
//! The file is `--config FILE`, else `RESEARCH_LEDGER_CONFIG`, else `research-ledger.toml` in
//! the working directory when there is one. Its top-level keys are the global flags
//! (`data_dir`, `log_format`); a table named after a command holds that command's flags
//! (`[serve]`, `[mcp]`, …), each spelled with underscores for dashes; `[limits.*]` tables hold
//! the bounds of the service's parts, which have no flags. Precedence: flags, then environment
//! variables, then the file, then the defaults — the file's values become the flags' defaults,
//! so clap applies the rest. A key the program does not know is an error, never ignored: a
//! misspelt limit must not silently leave the default in force. `docs/configuration.md` lists
//! every key.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The bounds that have no flags, as the file may set them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LimitsConfig {
    /// The research domain: sizes of questions, evidence, summaries, items per call.
    pub(crate) research: research::Limits,
    /// The ledger: event and batch sizes, queue depth, reads.
    pub(crate) ledger: ledger::Limits,
    /// The read models: page sizes, snapshots.
    pub(crate) projections: service::projections::Limits,
    /// The embedded corpus.
    pub(crate) corpus: sources::CorpusLimits,
    /// The content store.
    pub(crate) blobs: BlobLimits,
}

/// The bound on evidence texts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct BlobLimits {
    /// Largest evidence text kept, in bytes.
    pub(crate) content_bytes_max: u64,
    /// Read and ignored: the content journal it bounded is gone (texts are written with the
    /// events that cite them). Kept so that a file that sets it still loads.
    pub(crate) journal_bytes_max: Option<u64>,
}

impl Default for BlobLimits {
    fn default() -> Self {
        BlobLimits {
            content_bytes_max: sources::BlobOptions::default().content_bytes_max,
            journal_bytes_max: None,
        }
    }
}

static LIMITS: OnceLock<LimitsConfig> = OnceLock::new();
static STORAGE_URL: OnceLock<Option<String>> = OnceLock::new();
static SEARCH: OnceLock<Search> = OnceLock::new();

/// The search by meaning a run was given (`--encoder`, `--vectors-dir`).
#[derive(Debug, Default)]
struct Search {
    encoder: Option<PathBuf>,
    vectors_dir: Option<PathBuf>,
}

/// Records the run's sentence encoder and vector folder, once, before any command opens the
/// corpus.
pub(crate) fn set_search(encoder: Option<PathBuf>, vectors_dir: Option<PathBuf>) {
    let _ = SEARCH.set(Search {
        encoder,
        vectors_dir,
    });
}

fn search() -> &'static Search {
    SEARCH.get_or_init(Search::default)
}

/// The ranking by meaning for a corpus of `data_dir`, when the run names an encoder: the one a
/// service over `data_dir` would open.
pub(crate) fn similarity(
    data_dir: &Path,
) -> anyhow::Result<Option<std::sync::Arc<sources::Similarity>>> {
    Ok(service::open_similarity(&service_options(data_dir))?)
}

/// The shared database a run was given (`--storage-url`, `RESEARCH_LEDGER_STORAGE_URL` or
/// `[storage] url`), if any.
pub(crate) fn storage_url() -> Option<&'static str> {
    STORAGE_URL.get().and_then(|url| url.as_deref())
}

/// Records the run's shared database, once, before any command opens the ledger.
pub(crate) fn set_storage_url(url: Option<String>) {
    let _ = STORAGE_URL.set(url);
}

/// Checks a storage URL's scheme: PostgreSQL is the one shared store there is.
pub(crate) fn parse_storage_url(text: &str) -> Result<String, String> {
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        // Its TLS parameters are checked now (a bad sslmode, a CA file that cannot be read),
        // rather than at the first connection.
        pg_connect::Connector::parse(text).map_err(|e| e.to_string())?;
        Ok(text.to_owned())
    } else {
        Err("a storage URL is postgres://USER@HOST:PORT/DB".into())
    }
}

/// The limits the file set (the defaults without a file).
pub(crate) fn limits() -> &'static LimitsConfig {
    LIMITS.get_or_init(LimitsConfig::default)
}

/// The service's options over `data_dir`, with the file's limits.
pub(crate) fn service_options(data_dir: &Path) -> service::ServiceOptions {
    let limits = limits();
    let mut options = service::ServiceOptions::new(data_dir);
    options.research = limits.research.clone();
    options.ledger.limits = limits.ledger.clone();
    options.projections = limits.projections.clone();
    options.corpus = limits.corpus.clone();
    options.blobs.content_bytes_max = limits.blobs.content_bytes_max;
    options.ledger.origin = origin();
    options.storage_url = storage_url().map(str::to_owned);
    options.encoder = search().encoder.clone();
    if let Some(dir) = &search().vectors_dir {
        options.layout.vectors = dir.clone();
    }
    options
}

/// The log origin an operator configured (`RESEARCH_LEDGER_ORIGIN`, or `serve --origin`), used
/// when a ledger introduces its first key. Empty is unset.
pub(crate) fn origin() -> Option<String> {
    std::env::var("RESEARCH_LEDGER_ORIGIN")
        .ok()
        .filter(|o| !o.is_empty())
}

/// Refuses a `RESEARCH_LEDGER_ORIGIN` that cannot name a key, before any command runs: a
/// ledger given one would open, and serve, without being able to sign a checkpoint.
pub(crate) fn check_origin() -> Result<(), String> {
    match std::env::var("RESEARCH_LEDGER_ORIGIN") {
        Ok(origin) => parse_origin(&origin)
            .map(drop)
            .map_err(|e| format!("RESEARCH_LEDGER_ORIGIN: {e}")),
        Err(std::env::VarError::NotPresent) => Ok(()),
        Err(std::env::VarError::NotUnicode(_)) => Err("RESEARCH_LEDGER_ORIGIN is not UTF-8".into()),
    }
}

/// Reads a log origin: empty (unset), or a name a key can take — no space, no `+`, no control
/// character.
pub(crate) fn parse_origin(text: &str) -> Result<String, String> {
    if !text.is_empty() {
        ledger_proof::note::check_key_name(text).map_err(|e| e.to_string())?;
    }
    Ok(text.to_owned())
}

/// Where the file is: the `--config` flag, the environment, or the working directory.
fn locate(args: &[std::ffi::OsString]) -> anyhow::Result<Option<PathBuf>> {
    let mut iter = args.iter().skip(1);
    while let Some(arg) = iter.next() {
        let Some(text) = arg.to_str() else { continue };
        if text == "--" {
            break;
        }
        if text == "--config" {
            let Some(path) = iter.next() else {
                bail!("--config needs a file");
            };
            return Ok(Some(PathBuf::from(path)));
        }
        if let Some(path) = text.strip_prefix("--config=") {
            return Ok(Some(PathBuf::from(path)));
        }
    }
    if let Some(path) = std::env::var_os("RESEARCH_LEDGER_CONFIG") {
        return Ok(Some(PathBuf::from(path)));
    }
    let local = PathBuf::from("research-ledger.toml");
    Ok(local.is_file().then_some(local))
}

/// A scalar (or list of scalars) of the file as the text a flag would take.
fn flag_values(key: &str, value: &toml::Value) -> anyhow::Result<Vec<String>> {
    let scalar = |v: &toml::Value| -> anyhow::Result<String> {
        Ok(match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => bail!("{key}: {} is not a flag's value", other.type_str()),
        })
    };
    match value {
        toml::Value::Array(items) => items.iter().map(scalar).collect(),
        other => Ok(vec![scalar(other)?]),
    }
}

/// Makes the file's values the defaults of the flags they name.
fn apply_flags(
    mut command: clap::Command,
    table: &toml::Table,
    place: &str,
) -> anyhow::Result<clap::Command> {
    for (key, value) in table {
        if let toml::Value::Table(inner) = value {
            if place.is_empty() && key == "storage" {
                command = apply_storage(command, inner)?;
                continue;
            }
            if place.is_empty() && key != "limits" {
                if command.find_subcommand(key).is_none() {
                    bail!("[{key}]: there is no command {key}");
                }
                let mut failure = None;
                command =
                    command.mut_subcommand(key, |sub| match apply_flags(sub.clone(), inner, key) {
                        Ok(sub) => sub,
                        Err(e) => {
                            failure = Some(e);
                            sub
                        }
                    });
                if let Some(e) = failure {
                    return Err(e);
                }
                continue;
            }
            if place.is_empty() {
                continue; // [limits], read separately.
            }
            bail!("[{place}] {key}: a command's settings are not tables");
        }
        let where_ = if place.is_empty() {
            key.clone()
        } else {
            format!("[{place}] {key}")
        };
        let known = command
            .get_arguments()
            .any(|a| a.get_id() == key.as_str() && !a.is_positional());
        if !known || key == "config" {
            bail!("{where_}: not a setting of research-ledger {place}");
        }
        let values = flag_values(&where_, value)?;
        command = command.mut_arg(key.as_str(), |arg| {
            if values.len() == 1 && arg.get_num_args().is_none_or(|n| n.max_values() <= 1) {
                arg.default_value(values[0].clone())
            } else {
                arg.default_values(values.clone())
            }
        });
    }
    Ok(command)
}

/// `[storage]`: where the shared store is (`url`), the default of `--storage-url`.
fn apply_storage(command: clap::Command, table: &toml::Table) -> anyhow::Result<clap::Command> {
    let mut url = None;
    for (key, value) in table {
        match (key.as_str(), value) {
            ("url", toml::Value::String(text)) => {
                url = Some(parse_storage_url(text).map_err(anyhow::Error::msg)?);
            }
            ("url", other) => bail!("[storage] url: {} is not a URL", other.type_str()),
            _ => bail!("[storage] {key}: not a setting of the storage"),
        }
    }
    Ok(match url {
        Some(url) => command.mut_arg("storage_url", |arg| arg.default_value(url)),
        None => command,
    })
}

/// Every key of a table, dotted.
fn keys(prefix: &str, table: &toml::Table, out: &mut BTreeSet<String>) {
    for (key, value) in table {
        let path = format!("{prefix}{key}");
        if let toml::Value::Table(inner) = value {
            keys(&format!("{path}."), inner, out);
        } else {
            out.insert(path);
        }
    }
}

/// Reads `[limits.*]`, refusing keys the limits do not have.
fn read_limits(table: Option<&toml::Value>) -> anyhow::Result<LimitsConfig> {
    let Some(value) = table else {
        return Ok(LimitsConfig::default());
    };
    let given = value.as_table().context("limits is a table of tables")?;
    let limits: LimitsConfig = value.clone().try_into().context("[limits]")?;
    // The parts' own limits accept unknown keys (and keep their defaults); the file must not.
    let known = toml::Table::try_from(&limits).context("[limits]")?;
    let (mut asked, mut have) = (BTreeSet::new(), BTreeSet::new());
    keys("limits.", given, &mut asked);
    keys("limits.", &known, &mut have);
    if let Some(unknown) = asked.difference(&have).next() {
        bail!("{unknown}: not a limit; docs/configuration.md lists every one");
    }
    check_ranges(&known)?;
    Ok(limits)
}

/// Limits for which 0 means something rather than nothing at all: no date past today, no
/// snapshot on its own, no problem listed (only counted). Every other limit is at least 1.
const ZERO_MEANS_SOMETHING: &[&str] = &[
    "research.future_date_days_max",
    "projections.snapshot_every_events",
    "corpus.ingest_problems_listed_max",
];

/// Limits read and ignored, kept so that older files still load.
const IGNORED: &[&str] = &["blobs.journal_bytes_max"];

/// Limits a part works with only within a range of its own: the key, the least and the most
/// it takes, and why. The parts bring a value outside to the nearest they can; a file that asks
/// for one is refused instead, so that what runs is what the file says.
const RANGES: &[(&str, u64, u64, &str)] = &[
    (
        "ledger.segment_bytes_max",
        ledger::limits::SEGMENT_BYTES_MIN,
        u64::MAX,
        "a segment holds its header and room for frames",
    ),
    (
        "ledger.subscription_buffer_events",
        1,
        ledger::limits::SUBSCRIPTION_BUFFER_EVENTS_MAX as u64,
        "the buffer is allocated whole when the ledger opens",
    ),
    (
        "ledger.append_queue_max",
        1,
        ledger::limits::APPEND_QUEUE_MAX as u64,
        "the queue counts no further",
    ),
    (
        "projections.feed_buffer_events",
        1,
        service::projections::limits::FEED_BUFFER_EVENTS_MAX as u64,
        "the buffer is allocated whole when the read models start",
    ),
    (
        "projections.snapshot_cache_bytes_max",
        service::projections::limits::SNAPSHOT_CACHE_BYTES_MIN,
        u64::MAX,
        "the least cache the snapshot database takes",
    ),
    (
        "corpus.writer_memory_bytes_max",
        sources::limits::WRITER_MEMORY_BYTES_MIN,
        sources::limits::WRITER_MEMORY_BYTES_MAX,
        "what the index writer takes",
    ),
];

/// A default that may not exceed the most of its kind: each default, and its most.
const DEFAULT_AT_MOST: &[(&str, &str)] = &[
    (
        "projections.page_tasks_default",
        "projections.page_tasks_max",
    ),
    (
        "projections.page_events_default",
        "projections.page_events_max",
    ),
];

/// Refuses a limit its part cannot work with as given, naming it: 0 where 0 would allow
/// nothing at all, a value outside its part's range, a default above its most. `known` is every
/// limit, by part.
fn check_ranges(known: &toml::Table) -> anyhow::Result<()> {
    let value = |key: &str| -> Option<u64> {
        let (part, name) = key.split_once('.')?;
        let number = known.get(part)?.as_table()?.get(name)?.as_integer()?;
        u64::try_from(number).ok()
    };
    for (part, table) in known {
        let Some(table) = table.as_table() else {
            continue;
        };
        for (name, number) in table {
            let key = format!("{part}.{name}");
            let Some(actual) = number.as_integer().and_then(|n| u64::try_from(n).ok()) else {
                continue;
            };
            if IGNORED.contains(&key.as_str()) {
                continue;
            }
            let (least, most, why) = match RANGES.iter().find(|(k, ..)| *k == key) {
                Some(&(_, least, most, why)) => (least, most, why),
                None if ZERO_MEANS_SOMETHING.contains(&key.as_str()) => continue,
                None => (1, u64::MAX, "0 would allow nothing at all"),
            };
            if actual < least {
                bail!("limits.{key} = {actual}: at least {least} ({why})");
            }
            if actual > most {
                bail!("limits.{key} = {actual}: at most {most} ({why})");
            }
        }
    }
    for (default, max) in DEFAULT_AT_MOST {
        if let (Some(d), Some(m)) = (value(default), value(max))
            && d > m
        {
            bail!(
                "limits.{default} = {d}: at most limits.{max} ({m}), which bounds what it defaults"
            );
        }
    }
    Ok(())
}

/// Reads the file, if any, into `command`'s defaults and the limits.
pub(crate) fn load(
    command: clap::Command,
    args: &[std::ffi::OsString],
) -> anyhow::Result<clap::Command> {
    let Some(path) = locate(args)? else {
        return Ok(command);
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the configuration {}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("{} is not TOML", path.display()))?;
    let limits = read_limits(table.get("limits")).with_context(|| path.display().to_string())?;
    let _ = LIMITS.set(limits);
    apply_flags(command, &table, "").with_context(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    fn parse(text: &str) -> anyhow::Result<clap::Command> {
        let table: toml::Table = text.parse()?;
        read_limits(table.get("limits"))?;
        apply_flags(crate::Cli::command(), &table, "")
    }

    #[test]
    fn the_file_sets_defaults_that_the_environment_and_flags_override() {
        let command = parse(
            "data_dir = \"/srv/ledger\"\n[serve]\nlisten = \"127.0.0.1:9000\"\nrequests_in_flight_max = 7\nmcp_allowed_host = [\"a.example\", \"b.example\"]\n",
        )
        .unwrap();
        let matches = command
            .clone()
            .try_get_matches_from(["research-ledger", "serve"])
            .unwrap();
        assert_eq!(
            matches.get_one::<PathBuf>("data_dir").unwrap(),
            &PathBuf::from("/srv/ledger")
        );
        let serve = matches.subcommand_matches("serve").unwrap();
        assert_eq!(
            serve
                .get_one::<std::net::SocketAddr>("listen")
                .unwrap()
                .port(),
            9000
        );
        assert_eq!(
            *serve.get_one::<usize>("requests_in_flight_max").unwrap(),
            7
        );
        let hosts: Vec<&String> = serve.get_many("mcp_allowed_host").unwrap().collect();
        assert_eq!(hosts, ["a.example", "b.example"]);
        // A flag wins over the file.
        let matches = command
            .try_get_matches_from(["research-ledger", "serve", "--requests-in-flight-max", "9"])
            .unwrap();
        let serve = matches.subcommand_matches("serve").unwrap();
        assert_eq!(
            *serve.get_one::<usize>("requests_in_flight_max").unwrap(),
            9
        );
    }

    #[test]
    fn the_file_can_send_a_command_through_a_server() {
        let command = parse(
            "[verify]\nserver = \"http://127.0.0.1:9000\"\ntoken = \"rl_x\"\n[export]\npublic_key = \"ab\"\n",
        )
        .unwrap();
        let matches = command
            .try_get_matches_from(["research-ledger", "verify"])
            .unwrap();
        let verify = matches.subcommand_matches("verify").unwrap();
        assert_eq!(
            verify.get_one::<String>("server").unwrap(),
            "http://127.0.0.1:9000"
        );
        assert_eq!(verify.get_one::<String>("token").unwrap(), "rl_x");
    }

    #[test]
    fn the_storage_table_names_the_shared_database() {
        let url = "postgres://ledger@127.0.0.1:5432/ledger";
        let command = parse(&format!("[storage]\nurl = \"{url}\"\n")).unwrap();
        let matches = command
            .clone()
            .try_get_matches_from(["research-ledger", "verify"])
            .unwrap();
        assert_eq!(matches.get_one::<String>("storage_url").unwrap(), url);
        let other = "postgres://other@127.0.0.1:5432/other";
        let matches = command
            .try_get_matches_from(["research-ledger", "--storage-url", other, "verify"])
            .unwrap();
        assert_eq!(matches.get_one::<String>("storage_url").unwrap(), other);
        for (text, says) in [
            ("[storage]\nurl = \"mysql://x@y/z\"\n", "postgres://"),
            ("[storage]\nurl = 5\n", "not a URL"),
            ("[storage]\nuri = \"postgres://x@y/z\"\n", "uri"),
        ] {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(says), "{text:?}: {error}");
        }
        let flag = crate::Cli::command().try_get_matches_from([
            "research-ledger",
            "--storage-url",
            "/var/lib/x",
            "verify",
        ]);
        assert!(flag.is_err(), "a path is not a storage URL");
    }

    #[test]
    fn unknown_keys_are_errors_not_ignored() {
        for (text, says) in [
            ("[serve]\nlisen = \"127.0.0.1:1\"\n", "lisen"),
            ("[serv]\nlisten = \"127.0.0.1:1\"\n", "no command serv"),
            ("nonsense = 1\n", "nonsense"),
            (
                "[limits.research]\nsumary_chars_max = 5\n",
                "limits.research.sumary_chars_max",
            ),
            ("[limits.nothing]\nx = 1\n", "nothing"),
        ] {
            let error = format!("{:#}", parse(text).unwrap_err());
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn limits_in_the_file_reach_the_service() {
        let table: toml::Table =
            "[limits.research]\nsummary_chars_max = 123\n[limits.blobs]\ncontent_bytes_max = 4096\n"
                .parse()
                .unwrap();
        let limits = read_limits(table.get("limits")).unwrap();
        assert_eq!(limits.research.summary_chars_max, 123);
        assert_eq!(limits.blobs.content_bytes_max, 4096);
        assert_eq!(limits.ledger, ledger::Limits::default());
        // A file written for the content journal, now gone, still loads.
        let table: toml::Table = "[limits.blobs]\njournal_bytes_max = 8388608\n"
            .parse()
            .unwrap();
        assert!(read_limits(table.get("limits")).is_ok());
    }

    /// Every limit, by its key under `[limits]` (`research.question_chars_max`), with its
    /// default.
    fn every_limit() -> Vec<(String, u64)> {
        let defaults = toml::Table::try_from(LimitsConfig::default()).unwrap();
        let mut limits = Vec::new();
        for (part, table) in &defaults {
            for (name, value) in table.as_table().unwrap() {
                if let Some(n) = value.as_integer() {
                    limits.push((format!("{part}.{name}"), u64::try_from(n).unwrap()));
                }
            }
        }
        limits
    }

    /// `[limits]` of a file that sets `key` (`part.name`) to `value`, read.
    fn read_one(key: &str, value: u64) -> anyhow::Result<LimitsConfig> {
        let (part, name) = key.split_once('.').unwrap();
        let table: toml::Table = format!("[limits.{part}]\n{name} = {value}\n")
            .parse()
            .unwrap();
        read_limits(table.get("limits"))
    }

    /// A limit its part cannot work with as given is refused when the file is read, naming it,
    /// rather than left to a part that would panic, run out of memory, fail later or quietly
    /// use another value: 0 wherever 0 allows nothing, a value outside a part's own range, a
    /// default above its most.
    #[test]
    fn limits_a_part_cannot_work_with_are_refused_naming_the_key() {
        let limits = every_limit();
        assert!(limits.len() > 60, "{limits:?}");
        for (key, default) in &limits {
            read_one(key, *default).unwrap_or_else(|e| panic!("{key} = {default}: {e:#}"));
            let zero = read_one(key, 0);
            if ZERO_MEANS_SOMETHING.contains(&key.as_str()) {
                assert!(zero.is_ok(), "{key} = 0: {:#}", zero.unwrap_err());
            } else {
                let error = format!("{:#}", zero.unwrap_err());
                assert!(
                    error.contains(&format!("limits.{key} = 0: at least ")),
                    "{key}: {error}"
                );
            }
        }
        let page = include_str!("../docs/configuration.md");
        for &(key, least, most, why) in RANGES {
            assert!(limits.iter().any(|(k, _)| k == key), "{key} is not a limit");
            let name = key.rsplit('.').next().unwrap();
            let most_shown = if most == u64::MAX {
                "—".to_owned()
            } else {
                most.to_string()
            };
            let row = format!("| {least} | {most_shown} |");
            assert!(
                page.lines()
                    .any(|l| l.contains(&format!("`{name}`")) && l.contains(&row)),
                "docs/configuration.md has no row for {name} with {row}"
            );
            read_one(key, least).unwrap();
            let error = format!("{:#}", read_one(key, least - 1).unwrap_err());
            assert!(
                error.contains(&format!("at least {least} ({why})")),
                "{error}"
            );
            if most < i64::MAX as u64 {
                read_one(key, most).unwrap();
                let error = format!("{:#}", read_one(key, most + 1).unwrap_err());
                assert!(
                    error.contains(&format!("at most {most} ({why})")),
                    "{error}"
                );
            }
        }
        let error = format!(
            "{:#}",
            read_one("projections.page_tasks_default", 101).unwrap_err()
        );
        assert!(
            error.contains("limits.projections.page_tasks_default = 101: at most limits.projections.page_tasks_max (100)"),
            "{error}"
        );
        let table: toml::Table =
            "[limits.projections]\npage_events_default = 600\npage_events_max = 600\n"
                .parse()
                .unwrap();
        assert!(read_limits(table.get("limits")).is_ok());
    }

    #[test]
    fn the_configuration_page_names_every_key() {
        let page = include_str!("../docs/configuration.md");
        let mut missing = Vec::new();
        let root = crate::Cli::command();
        for arg in root.get_arguments() {
            let id = arg.get_id().as_str();
            if !arg.is_positional()
                && !["help", "version", "config"].contains(&id)
                && !page.contains(&format!("`{id}`"))
            {
                missing.push(id.to_owned());
            }
        }
        for sub in ["serve", "mcp"] {
            let command = root.find_subcommand(sub).unwrap();
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if !arg.is_positional()
                    && id != "help"
                    && !arg.is_global_set()
                    && !page.contains(&format!("`{id}`"))
                {
                    missing.push(format!("{sub}.{id}"));
                }
            }
        }
        // Every command that can act through a server, and the keys it takes for that.
        for command in root.get_subcommands() {
            let remote: Vec<&str> = command
                .get_arguments()
                .map(|a| a.get_id().as_str())
                .filter(|id| ["server", "token", "public_key"].contains(id))
                .collect();
            let table = format!("`[{}]`", command.get_name());
            if remote.contains(&"server") && !page.contains(&table) {
                missing.push(table);
            }
            for id in remote {
                if !page.contains(&format!("`{id}`")) {
                    missing.push(format!("{}.{id}", command.get_name()));
                }
            }
        }
        let mut limits = BTreeSet::new();
        keys(
            "",
            &toml::Table::try_from(LimitsConfig::default()).unwrap(),
            &mut limits,
        );
        for key in limits {
            let name = key.rsplit('.').next().unwrap();
            if !page.contains(&format!("`{name}`")) {
                missing.push(format!("limits.{key}"));
            }
        }
        assert!(
            missing.is_empty(),
            "docs/configuration.md does not name {missing:?}"
        );
    }
}
