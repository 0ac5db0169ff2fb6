//! `research-ledger witness serve`: an auditor's witness, speaking C2SP `tlog-witness`.
//!
//! It trusts the log keys it is given (`--log VKEY`, one per log; the key's name is the log's
//! origin), keeps the latest checkpoint it cosigned of each log in its own directory, and
//! cosigns a new checkpoint only when the log signed it and a consistency proof shows it
//! extends the one it holds: a rollback, a fork or a rewritten log is refused, with the status
//! the protocol gives it and a line on stderr that says what the log tried. `POST
//! /add-checkpoint` takes checkpoints; `GET /<hex SHA-256 of the origin>/checkpoint` serves
//! the latest one cosigned, with its cosignature.
//!
//! The witness's key is `DIR/witness.key` (64 hex digits, mode 0600), made at first start; its
//! verifier key is printed on start (`witness NAME+ID+BASE64`) for logs and auditors to
//! configure. The state is `DIR/state.json`, replaced atomically and synced before a
//! cosignature is returned.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ledger::ledger_proof::note::TYPE_ED25519;
use ledger::ledger_proof::witness::{
    AddCheckpoint, LogState, WitnessError, check_add, checkpoint_head, cosign,
};
use ledger::ledger_proof::{SigningKey, VerifierKey};
use sha2::Digest as _;
use tokio::sync::Mutex;

use crate::Outcome;

/// Largest add-checkpoint body read: a checkpoint with many cosignatures and 63 proof lines is
/// a few kilobytes.
const REQUEST_BYTES_MAX: usize = 64 * 1024;

/// Arguments of `witness`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Serve the witness.
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Where the witness keeps its key and its state.
    #[arg(long, default_value = "./witness")]
    dir: PathBuf,
    /// The witness's name (its key name): a schema-less URL is customary.
    #[arg(long, default_value = "research-ledger-witness")]
    name: String,
    /// The verifier key of a log to witness (`origin+key ID+base64`, as `key show` prints it);
    /// repeat for more logs, or for the keys a log rotates to.
    #[arg(long = "log", value_name = "VKEY", required = true)]
    logs: Vec<String>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:7879")]
    listen: SocketAddr,
}

/// The witness's shared state.
struct Witness {
    key: SigningKey,
    name: String,
    logs: Vec<VerifierKey>,
    state_path: PathBuf,
    /// Per origin, the latest checkpoint cosigned; the lock makes check-and-record atomic.
    held: Mutex<BTreeMap<String, LogState>>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Outcome> {
    let Action::Serve(args) = &args.action;
    let logs = args
        .logs
        .iter()
        .map(|t| VerifierKey::parse_typed(t, TYPE_ED25519))
        .collect::<Result<Vec<_>, _>>()
        .context("--log is a log's verifier key")?;
    ledger::ledger_proof::note::check_key_name(&args.name)?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let key = load_or_create_key(&args.dir.join("witness.key"))?;
    let state_path = args.dir.join("state.json");
    let held = match std::fs::read_to_string(&state_path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("{} is not a witness state", state_path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => return Err(e).context(format!("cannot read {}", state_path.display())),
    };
    let vkey = VerifierKey::cosigner(&args.name, key.public_key())?;
    let witness = Arc::new(Witness {
        key,
        name: args.name.clone(),
        logs,
        state_path,
        held: Mutex::new(held),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let bound = listener.local_addr()?;
        say!("listening on http://{bound}");
        say!("witness {vkey}");
        let app = Router::new()
            .route("/add-checkpoint", post(add_checkpoint))
            .route("/{origin_hash}/checkpoint", get(latest))
            .with_state(witness);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("the witness stopped")
    })?;
    Ok(Outcome::Passed)
}

fn load_or_create_key(path: &Path) -> anyhow::Result<SigningKey> {
    let mut secret = [0u8; 32];
    match std::fs::read_to_string(path) {
        Ok(text) => {
            hex::decode_to_slice(text.trim(), &mut secret)
                .map_err(|_| anyhow::anyhow!("{} is not a 64-digit hex key", path.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            file.write_all(format!("{}\n", hex::encode(secret)).as_bytes())?;
            file.sync_all()?;
            sync_parent(path)?;
        }
        Err(e) => return Err(e).context(format!("cannot read {}", path.display())),
    }
    Ok(SigningKey::from_secret_bytes(&secret))
}

fn sync_parent(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Replaces the state file: written beside it, synced, renamed over it, the directory synced.
fn persist(path: &Path, held: &BTreeMap<String, LogState>) -> anyhow::Result<()> {
    let staged = path.with_extension("json.new");
    let mut file = std::fs::File::create(&staged)?;
    file.write_all(serde_json::to_string_pretty(held)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&staged, path)?;
    sync_parent(path)
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn add_checkpoint(State(witness): State<Arc<Witness>>, body: Bytes) -> Response {
    if body.len() > REQUEST_BYTES_MAX {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "text/plain; charset=utf-8",
            "too large\n".into(),
        );
    }
    let Ok(body) = std::str::from_utf8(&body) else {
        return text(
            StatusCode::BAD_REQUEST,
            "text/plain; charset=utf-8",
            "not UTF-8\n".into(),
        );
    };
    match cosign_request(&witness, body).await {
        Ok(line) => text(StatusCode::OK, "text/plain; charset=utf-8", line),
        Err(refusal) => refused(&refusal),
    }
}

/// A refusal: its status, and for a conflict the size held (`text/x.tlog.size`), as C2SP says.
fn refused(refusal: &Refusal) -> Response {
    match refusal {
        Refusal::Witness(WitnessError::Conflict { cosigned, .. }) => text(
            StatusCode::CONFLICT,
            "text/x.tlog.size",
            format!("{cosigned}\n"),
        ),
        Refusal::Witness(e) => {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
            text(status, "text/plain; charset=utf-8", format!("{e}\n"))
        }
        Refusal::Internal(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            format!("{e}\n"),
        ),
    }
}

enum Refusal {
    Witness(WitnessError),
    Internal(String),
}

async fn cosign_request(witness: &Witness, body: &str) -> Result<String, Refusal> {
    let request = AddCheckpoint::parse(body).map_err(Refusal::Witness)?;
    let mut held = witness.held.lock().await;
    let checked = checkpoint_head(&request.note.text)
        .and_then(|(origin, ..)| check_add(&request, &witness.logs, held.get(&origin)));
    let (origin, size, root) = match checked {
        Ok(ok) => ok,
        Err(e) => {
            if matches!(
                e,
                WitnessError::Unprocessable(_) | WitnessError::BadRequest(_)
            ) {
                tell!("witness: REFUSED a checkpoint: {e}");
            }
            return Err(Refusal::Witness(e));
        }
    };
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| Refusal::Internal(e.to_string()))?
        .as_secs();
    let line = cosign(&witness.key, &witness.name, &request.note.text, timestamp)
        .map_err(|e| Refusal::Internal(e.to_string()))?;
    let mut note = request.note.clone();
    note.signatures.retain(|s| s.name != witness.name);
    note.signatures.push(line.clone());
    let mut next = held.clone();
    next.insert(
        origin.clone(),
        LogState {
            size,
            root,
            note: note.render(),
        },
    );
    // Durable before the cosignature is returned: a witness that forgot what it signed could
    // be made to sign a fork.
    persist(&witness.state_path, &next).map_err(|e| Refusal::Internal(e.to_string()))?;
    *held = next;
    tell!("witness: cosigned {origin} at tree size {size}");
    Ok(line.line())
}

async fn latest(
    State(witness): State<Arc<Witness>>,
    UrlPath(origin_hash): UrlPath<String>,
) -> Response {
    let held = witness.held.lock().await;
    let found = held
        .iter()
        .find(|(origin, _)| hex::encode(sha2::Sha256::digest(origin.as_bytes())) == origin_hash);
    match found {
        Some((_, state)) => text(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            state.note.clone(),
        ),
        None => text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "this witness has cosigned no checkpoint of that log\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_answers_the_size_held_as_c2sp_says() {
        let response = refused(&Refusal::Witness(WitnessError::Conflict {
            old: 3,
            cosigned: 7,
        }));
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"text/x.tlog.size"[..])
        );
    }
}
