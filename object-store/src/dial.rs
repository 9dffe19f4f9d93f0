//! Reaching an object store from a URL: `s3://bucket/prefix`, S3 or an S3-compatible store
//! configured from the AWS environment (the `aws` feature).

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::path::Path;
use zkfence::fence::BoxError;

use crate::fence::ObjectFence;

/// A bucket to reach, and the prefix of the fenced objects in it, as `s3://bucket/prefix`
/// names them.
#[derive(Debug, Clone)]
pub(crate) struct Dial {
    bucket: String,
    prefix: Path,
}

impl Dial {
    /// The bucket and prefix `url` names (`s3://bucket/prefix`; a `/` at the end is no part of
    /// the prefix), or what to give instead.
    pub(crate) fn parse(url: &str) -> Result<Dial, BoxError> {
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(format!("{url:?} is no S3 URL: give s3://bucket/prefix").into());
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err("s3:// names no bucket: give s3://bucket/prefix".into());
        }
        let prefix = Path::from(prefix.trim_end_matches('/'));
        Ok(Dial {
            bucket: bucket.to_owned(),
            prefix,
        })
    }

    /// The prefix of the fenced objects.
    pub(crate) fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// A fence over the bucket's objects: an S3 client configured from the AWS environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT` or
    /// `AWS_ENDPOINT_URL` for an S3-compatible store), with conditional puts. An `http://`
    /// endpoint is used as given (object_store's `AWS_ALLOW_HTTP` is implied, unless set
    /// otherwise).
    pub(crate) fn open(&self) -> Result<ObjectFence, BoxError> {
        let bucket = &self.bucket;
        let mut builder = AmazonS3Builder::from_env();
        let http = (builder.get_config_value(&AmazonS3ConfigKey::Endpoint))
            .is_some_and(|endpoint| endpoint.to_ascii_lowercase().starts_with("http://"));
        if http && std::env::var_os("AWS_ALLOW_HTTP").is_none() {
            builder = builder.with_allow_http(true);
        }
        let store = builder
            .with_bucket_name(bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .build()
            .map_err(|e| format!("s3://{bucket}: {e} (set AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; AWS_ENDPOINT for an S3-compatible store)"))?;
        Ok(ObjectFence::new(Arc::new(store)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_bucket_and_a_prefix() {
        let dial = Dial::parse("s3://reports/fenced/").unwrap();
        assert_eq!(
            (dial.bucket.as_str(), dial.prefix.as_ref()),
            ("reports", "fenced")
        );
        let dial = Dial::parse("s3://reports").unwrap();
        assert_eq!(
            (dial.bucket.as_str(), dial.prefix.as_ref()),
            ("reports", "")
        );
        assert!(Dial::parse("s3://")
            .unwrap_err()
            .to_string()
            .contains("bucket"));
        assert!(Dial::parse("gs://reports/x").is_err());
    }
}
