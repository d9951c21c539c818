//! The gateway as a fleet, as its tests build it: a PKI made with `openssl` (a root CA, an
//! intermediate the replicas share as `--ca-cert`/`--ca-key`, client certificates with a
//! subject or a SPIFFE ID, another CA nobody trusts), the TLS proxy hop's server certificate,
//! and clients that speak to the hop (curl `--proxy https://`, raw TLS through `openssl
//! s_client` is not needed: curl does it all).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs `openssl` with `args`, which must succeed.
pub fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Makes `path` mode `mode`.
pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

const CA_EXT: &str = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n";

/// A CA made in `dir` under `name`: `name.pem` and `name.key` (PKCS#8, mode 0600).
#[derive(Clone, Debug)]
pub struct CaFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A self-signed root CA called `cn`.
pub fn root_ca(dir: &Path, name: &str, cn: &str) -> CaFiles {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "30",
        "-subj",
        &format!("/O=sluice fleet test/CN={cn}"),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout",
        &s(&key),
        "-out",
        &s(&cert),
    ]);
    chmod(&key, 0o600);
    CaFiles { cert, key }
}

/// Signs a certificate for `subject` with `issuer`, with the extensions `ext`: the
/// certificate and its key (mode 0600) in `dir` as `name.pem`/`name.key`.
pub fn sign(dir: &Path, name: &str, subject: &str, issuer: &CaFiles, ext: &str) -> CaFiles {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let ext_file = dir.join(format!("{name}.ext"));
    std::fs::write(&ext_file, ext).expect("write ext");
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        &s(&key),
        "-out",
        &s(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-CA",
        &s(&issuer.cert),
        "-CAkey",
        &s(&issuer.key),
        "-CAcreateserial",
        "-days",
        "20",
        "-extfile",
        &s(&ext_file),
        "-out",
        &s(&cert),
    ]);
    chmod(&key, 0o600);
    CaFiles { cert, key }
}

/// The fleet's PKI: a root, and an intermediate under it that every replica is given, with
/// `chain.pem` (the intermediate, then the root) as `--ca-cert`.
#[derive(Debug)]
pub struct FleetCa {
    pub root: CaFiles,
    pub intermediate: CaFiles,
    /// The intermediate, then the root: what `--ca-cert` names.
    pub chain: PathBuf,
}

impl FleetCa {
    pub fn new(dir: &Path, tag: &str) -> FleetCa {
        let root = root_ca(dir, &format!("{tag}-root"), &format!("{tag} root CA"));
        let intermediate = sign(
            dir,
            &format!("{tag}-intermediate"),
            &format!("/O=sluice fleet test/CN={tag} intermediate CA"),
            &root,
            CA_EXT,
        );
        let chain = dir.join(format!("{tag}-chain.pem"));
        let text = format!(
            "{}{}",
            std::fs::read_to_string(&intermediate.cert).expect("read"),
            std::fs::read_to_string(&root.cert).expect("read")
        );
        std::fs::write(&chain, text).expect("write chain");
        FleetCa {
            root,
            intermediate,
            chain,
        }
    }

    /// The flags that give a replica this CA.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--ca-cert".to_string(),
            s(&self.chain),
            "--ca-key".to_string(),
            s(&self.intermediate.key),
        ]
    }
}

/// A client certificate signed by `ca`, with the subject `subject` (`/O=x/CN=y`) and, when
/// given, the SPIFFE ID `spiffe` as its one URI SAN.
pub fn client_cert(
    dir: &Path,
    name: &str,
    ca: &CaFiles,
    subject: &str,
    spiffe: Option<&str>,
) -> CaFiles {
    let mut ext = String::from(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    );
    if let Some(id) = spiffe {
        ext.push_str(&format!("subjectAltName=URI:{id}\n"));
    }
    sign(dir, name, subject, ca, &ext)
}

/// The TLS hop's server certificate (for `127.0.0.1` and `localhost`), signed by `ca`.
pub fn hop_cert(dir: &Path, ca: &CaFiles) -> CaFiles {
    sign(
        dir,
        "hop",
        "/CN=sluice gateway",
        ca,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
}

/// `cat` of several PEM files into `out` (a trust bundle).
pub fn bundle(out: &Path, parts: &[&Path]) -> PathBuf {
    let text: String = parts
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("read pem"))
        .collect();
    std::fs::write(out, text).expect("write bundle");
    out.to_path_buf()
}

/// The base64 body of a PEM key (what a sweep of written files must never find).
pub fn key_body(key: &Path) -> String {
    std::fs::read_to_string(key)
        .expect("read key")
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect()
}

/// Every file under `dir` (recursively) whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            found.extend(files_containing(&p, needle));
        } else if meta.is_file()
            && let Ok(bytes) = std::fs::read(&p)
            && bytes.windows(needle.len()).any(|w| w == needle)
        {
            found.push(p);
        }
    }
    found
}
