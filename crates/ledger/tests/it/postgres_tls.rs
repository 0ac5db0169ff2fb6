//! TLS to the database, for real: a throwaway cluster with `ssl` on, a certificate signed by a
//! CA made here, and `pg_hba.conf` taking TCP connections only as `hostssl`, so anything the
//! ledger opens in plain text is refused by the server.

use std::path::{Path, PathBuf};

use ledger::storage::postgres::schema_version;
use ledger::{ExpectedVersion, Ledger};
use test_support::postgres::{PgCluster, bin_dir, required};

use super::{options, request};

/// A CA called `ca_name`, and a server certificate it signed naming only `names`; answers (CA
/// PEM, cert PEM, key PEM).
fn certify(ca_name: &str, names: &[&str]) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

struct Tls {
    cluster: PgCluster,
    _dir: tempfile::TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
}

/// A TLS-only cluster whose certificate names 127.0.0.1 (not `localhost`), or `None` when
/// PostgreSQL is absent and allowed to be.
fn tls_cluster(test: &str) -> Option<Tls> {
    if bin_dir().is_none() && !required() {
        eprintln!("{test}: skipped, no PostgreSQL");
        return None;
    }
    let (ca, cert, key) = certify("the database's CA", &["127.0.0.1"]);
    let (other_ca, _, _) = certify("another CA", &["127.0.0.1"]);
    let cluster = PgCluster::start_tls(&cert, &key).expect("a TLS-only cluster starts");
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Some(Tls {
        ca: write("ca.pem", &ca),
        other_ca: write("other-ca.pem", &other_ca),
        cluster,
        _dir: dir,
    })
}

fn url(tls: &Tls, host: &str, query: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?{query}",
        tls.cluster.port()
    )
}

fn root(path: &Path) -> String {
    format!("sslrootcert={}", path.display())
}

fn open_err(url: &str, keys: &Path) -> String {
    match Ledger::open_postgres(url, keys, options(2)) {
        Ok(_) => panic!("{url} opened"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_ledger_connects_only_as_its_url_says_over_tls() {
    let Some(tls) = tls_cluster("the_ledger_connects_only_as_its_url_says_over_tls") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();

    // verify-full with the CA that signed the server's certificate: writes, and reads back
    // after a reopen, on sessions the server counts as TLS.
    let full = url(
        &tls,
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", root(&tls.ca)),
    );
    {
        let ledger = Ledger::open_postgres(&full, keys.path(), options(1)).unwrap();
        ledger
            .append(request("s", ExpectedVersion::Exact(0), &[b"one", b"two"]))
            .unwrap();
        ledger.checkpoint().unwrap();
    }
    let ledger = Ledger::open_postgres(&full, keys.path(), options(1)).unwrap();
    assert_eq!(ledger.head().size, 2);
    assert_eq!(ledger.read_range(0, 10).unwrap()[1].payload, b"two");
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).failure.is_none());
    let plain = tls
        .cluster
        .psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.client_addr IS NOT NULL AND NOT s.ssl",
        )
        .unwrap();
    assert_eq!(plain, "0");
    drop(ledger);

    // The wrong CA: refused, and the error says it is the certificate.
    let wrong = url(
        &tls,
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", root(&tls.other_ca)),
    );
    let err = open_err(&wrong, keys.path());
    assert!(err.contains("certificate"), "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");

    // The right CA but a host the certificate does not name: verify-full refuses, verify-ca
    // (the chain only) connects.
    let misnamed = url(
        &tls,
        "localhost",
        &format!("sslmode=verify-full&{}", root(&tls.ca)),
    );
    let err = open_err(&misnamed, keys.path());
    assert!(err.contains("certificate"), "{err}");
    let chain_only = url(
        &tls,
        "localhost",
        &format!("sslmode=verify-ca&{}", root(&tls.ca)),
    );
    assert_eq!(schema_version(&chain_only).unwrap(), 6);
    let err = schema_version(&url(
        &tls,
        "localhost",
        &format!("sslmode=verify-ca&{}", root(&tls.other_ca)),
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("UnknownIssuer"), "{err}");

    // require (no CA: encrypted, unverified) and the default, prefer, connect.
    let ledger = Ledger::open_postgres(
        &url(&tls, "127.0.0.1", "sslmode=require"),
        keys.path(),
        options(3),
    )
    .unwrap();
    assert_eq!(ledger.head().size, 2);
    drop(ledger);
    let default = format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        tls.cluster.port()
    );
    assert_eq!(schema_version(&default).unwrap(), 6);

    // disable against a server that takes TLS only: the server refuses.
    let err = schema_version(&url(&tls, "127.0.0.1", "sslmode=disable"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no pg_hba.conf entry"), "{err}");
    assert!(err.contains("no encryption"), "{err}");

    // A mode libpq does not know: refused before any connection, naming the modes.
    let err = open_err(&url(&tls, "127.0.0.1", "sslmode=verify"), keys.path());
    assert!(
        err.contains(
            "sslmode=verify is not one of disable, prefer, require, verify-ca, verify-full"
        ),
        "{err}"
    );
}
