//! Reading a whole etcd prefix in pages, all at one revision. The etcd client refuses an answer over
//! its 4 MiB decoding limit, so one unpaged range over a prefix that others write to (worker
//! registrations, controller specs) is a read anyone can make fail for good by writing enough: each
//! page here holds at most [`PAGE_KEYS`] keys, and a page the client still refuses is read again at
//! half the size (and later pages keep that size), down to one key (a value is at most 1.5 MiB in etcd, so one key always fits).

use etcd_client::{Client, GetOptions, KeyValue};
use tonic::Code;

/// The most keys one page asks for. Small worker registrations and specs fill a page long before its
/// bytes approach the client's limit; large values make pages shrink on their own.
const PAGE_KEYS: i64 = 256;

/// Every key under `prefix` at `revision` (0: the current one), and the revision read.
///
/// # Errors
/// Any etcd error other than a page too large to decode (those are retried smaller).
pub async fn get_prefix_paged(
    client: &Client,
    prefix: &str,
    mut revision: i64,
) -> Result<(Vec<KeyValue>, i64), etcd_client::Error> {
    let mut client = client.clone();
    let end = prefix_end(prefix.as_bytes());
    let mut from = prefix.as_bytes().to_vec();
    let mut limit = PAGE_KEYS;
    let mut kvs = Vec::new();
    loop {
        let mut options = GetOptions::new().with_range(end.clone()).with_limit(limit);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let page = match client.get(from.clone(), Some(options)).await {
            Ok(page) => page,
            Err(err) if too_large(&err) && limit > 1 => {
                limit = (limit / 2).max(1);
                continue;
            }
            Err(err) => return Err(err),
        };
        if revision == 0 {
            revision = page.header().map_or(0, |h| h.revision());
        }
        let more = page.more();
        if let Some(last) = page.kvs().last() {
            // The next page starts just after the last key read.
            from = last.key().to_vec();
            from.push(0);
        }
        kvs.extend(page.kvs().iter().cloned());
        if !more || page.kvs().is_empty() {
            return Ok((kvs, revision));
        }
    }
}

/// Whether the client refused a response for its size.
fn too_large(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(status)
        if matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted))
}

/// The end of the range of every key starting with `prefix` (etcd's `GetPrefixRangeEnd`).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: the range runs to the end of the keyspace.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_prefix_range_is_its_last_byte_plus_one() {
        assert_eq!(prefix_end(b"/flotilla/a/workers/"), b"/flotilla/a/workers0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
