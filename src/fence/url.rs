//! Store URLs: the query parameters a fence package reads itself (TLS's, which the store's
//! driver does not know), taken out of the URL it hands on.

use super::ConfigError;

/// A store's URL split in two by [`take_url_parameters`]: the URL without the parameters it
/// took, to hand on to the store's driver, and each parameter taken (its name, its decoded
/// value), for the fence package to read.
///
/// # Examples
///
/// ```
/// let (rest, taken): zkfence::fence::author::SplitUrl =
///     zkfence::fence::author::take_url_parameters("redis://h/0?ssl_ca_certs=%2Fca.pem", &["ssl_ca_certs"])?;
/// assert_eq!((rest.as_str(), taken[0].1.as_str()), ("redis://h/0", "/ca.pem"));
/// # Ok::<(), zkfence::fence::ConfigError>(())
/// ```
pub type SplitUrl<'n> = (String, Vec<(&'n str, String)>);

/// The query parameters of `url` named in `names`, taken out (percent-decoded), and the URL
/// without them, its other parameters in their order: for a fence package that reads some
/// parameters itself and hands the rest to its store's driver. A parameter given twice keeps
/// its last value.
///
/// # Errors
///
/// A [`ConfigError`] for a value that is not UTF-8 once decoded, or a `%` not followed by two
/// hex digits.
///
/// # Examples
///
/// ```
/// let (rest, taken) = zkfence::fence::author::take_url_parameters(
///     "postgresql://db/orders?sslmode=verify-full&application_name=x&sslrootcert=%2Fca.pem",
///     &["sslmode", "sslrootcert"],
/// )?;
/// assert_eq!(rest, "postgresql://db/orders?application_name=x");
/// assert_eq!(taken, [("sslmode", "verify-full".to_string()), ("sslrootcert", "/ca.pem".to_string())]);
/// # Ok::<(), zkfence::fence::ConfigError>(())
/// ```
pub fn take_url_parameters<'n>(url: &str, names: &[&'n str]) -> Result<SplitUrl<'n>, ConfigError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Vec::new()));
    };
    let (mut taken, mut kept): (Vec<(&'n str, String)>, Vec<&str>) = (Vec::new(), Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match names.iter().find(|n| **n == key) {
            Some(name) => {
                taken.retain(|(n, _)| n != name);
                taken.push((name, decode(name, value)?));
            }
            None => kept.push(pair),
        }
    }
    let rest = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((rest, taken))
}

/// The contents of the file at `path`, which the URL parameter `name` gives (a certificate,
/// a key): for a fence package that reads such files when it parses its URL, so that one it
/// cannot read is a [`ConfigError`] naming the parameter and the path, not a failure to
/// connect later.
///
/// # Errors
///
/// A [`ConfigError`] naming `name`, `path` and why it could not be read.
///
/// # Examples
///
/// ```
/// let err = zkfence::fence::author::read_url_file("sslcert", "/no/such/client.pem").unwrap_err();
/// assert!(err.to_string().contains("sslcert"));
/// assert!(err.given().starts_with("/no/such/client.pem"));
/// ```
pub fn read_url_file(name: &'static str, path: &str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| {
        ConfigError::new(
            name,
            format!("{path} ({e})"),
            "a file this user can read (a path on the machine zkfence runs on)",
        )
    })
}

/// A client certificate's chain and its private key, the PEM texts of the files two URL
/// parameters name (`(name, path)` each: libpq's `sslcert`/`sslkey`, the MySQL client's
/// `ssl-cert`/`ssl-key`, redis-py's `ssl_certfile`/`ssl_keyfile`), read when the URL is
/// parsed: the chain must hold a certificate, the key file an unencrypted private key (a
/// fence package's TLS library parses them; the handshake checks what they say).
///
/// # Errors
///
/// A [`ConfigError`] naming the parameter and the path: a file that cannot be read, a chain
/// without a certificate, a key file without a private key or with an encrypted one.
///
/// # Examples
///
/// ```
/// let err = zkfence::fence::author::read_client_identity(("sslcert", "/no/c.pem"), ("sslkey", "/no/c.key"))
///     .unwrap_err();
/// assert!(err.to_string().contains("sslcert"));
/// ```
pub fn read_client_identity(
    (cert_name, cert): (&'static str, &str),
    (key_name, key): (&'static str, &str),
) -> Result<(Vec<u8>, Vec<u8>), ConfigError> {
    let has = |text: &[u8], marker: &[u8]| text.windows(marker.len()).any(|w| w == marker);
    let chain = read_url_file(cert_name, cert)?;
    if !has(&chain, b"-----BEGIN CERTIFICATE-----") {
        return Err(ConfigError::new(
            cert_name,
            format!("{cert} (no certificate in it)"),
            "a PEM file of the client's certificate, then any intermediates",
        ));
    }
    let pem = read_url_file(key_name, key)?;
    let unusable = |why: &str| {
        ConfigError::new(
            key_name,
            format!("{key} ({why})"),
            "an unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1); decrypt an encrypted one with `openssl pkey -in KEY -out PLAIN`",
        )
    };
    if has(&pem, b"-----BEGIN ENCRYPTED") || has(&pem, b"Proc-Type: 4,ENCRYPTED") {
        return Err(unusable("encrypted"));
    }
    let keys: [&[u8]; 3] = [
        b"-----BEGIN PRIVATE KEY-----",
        b"-----BEGIN RSA PRIVATE KEY-----",
        b"-----BEGIN EC PRIVATE KEY-----",
    ];
    if !keys.iter().any(|marker| has(&pem, marker)) {
        return Err(unusable("no private key in it"));
    }
    Ok((chain, pem))
}

/// `text`, the value of the parameter `name`, with its `%XX` escapes decoded. An error names
/// the parameter, never its value: that may be a password (libpq's `sslpassword`).
fn decode(name: &str, text: &str) -> Result<String, ConfigError> {
    let bad = || {
        ConfigError::new(
            "URL parameter",
            format!("{name}=… (its value not shown)"),
            "a value whose % escapes are two hex digits each and spell UTF-8",
        )
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = text.get(at + 1..at + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_escape_names_the_parameter_and_never_shows_its_value() {
        let url = "postgresql://db/x?sslpassword=hun%zzter2&sslmode=require";
        let err = take_url_parameters(url, &["sslpassword"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sslpassword"), "{text}");
        assert!(!text.contains("hun"), "{text}");
        let not_utf8 = take_url_parameters("redis://c/?ssl_certfile=%C3%28", &["ssl_certfile"]);
        assert!(not_utf8.is_err());
    }

    #[test]
    fn parameters_come_out_decoded_and_the_rest_stays() {
        let (rest, taken) =
            take_url_parameters("mysql://db/x?a=1&ssl-ca=%2Fc%20a.pem&b=2", &["ssl-ca"]).unwrap();
        assert_eq!(rest, "mysql://db/x?a=1&b=2");
        assert_eq!(taken, [("ssl-ca", "/c a.pem".to_string())]);
        let (rest, taken) = take_url_parameters("mysql://db/x?ssl-ca=x", &["ssl-ca"]).unwrap();
        assert_eq!((rest.as_str(), taken.len()), ("mysql://db/x", 1));
        assert_eq!(
            take_url_parameters("redis://h/0", &["x"]).unwrap().0,
            "redis://h/0"
        );
        for bad in ["s://h?x=%zz", "s://h?x=%4", "s://h?x=%ff"] {
            assert!(take_url_parameters(bad, &["x"]).is_err(), "{bad}");
        }
    }
}
