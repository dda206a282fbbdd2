//! Streamed lists (a watch with `sendInitialEvents=true`) as consistent reads: kube-runtime's
//! streaming mode asks for `resourceVersion=0`, which lets the API server answer from whatever state
//! its cache holds, possibly older than writes that already succeeded. [`consistent_watch_lists`],
//! a request map in every fleet client, takes that parameter out, so the server streams the most
//! recent state, as a LIST with `resourceVersion` unset (and client-go's reflector) reads it.

use http::{Request, Uri};

/// The request with `resourceVersion=0` taken out when it asks for a streamed list, so the API server
/// streams the most recent state (a consistent read) instead of whatever its cache holds; every other
/// request unchanged.
pub fn consistent_watch_lists<B>(mut request: Request<B>) -> Request<B> {
    let Some(query) = request.uri().query() else {
        return request;
    };
    let pairs: Vec<&str> = query.split('&').collect();
    if !pairs.contains(&"sendInitialEvents=true") || !pairs.contains(&"resourceVersion=0") {
        return request;
    }
    let kept = pairs
        .iter()
        .filter(|p| **p != "resourceVersion=0")
        .copied()
        .collect::<Vec<_>>()
        .join("&");
    let path_and_query = format!("{}?{kept}", request.uri().path());
    let mut parts = request.uri().clone().into_parts();
    if let Ok(pq) = path_and_query.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rewritten(uri: &str) -> String {
        consistent_watch_lists(Request::get(uri).body(()).unwrap())
            .uri()
            .to_string()
    }

    #[test]
    fn a_streamed_list_asks_for_the_most_recent_state() {
        assert_eq!(
            rewritten(
                "http://api/api/v1/pods?allowWatchBookmarks=true&resourceVersion=0&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&watch=true"
            ),
            "http://api/api/v1/pods?allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&watch=true"
        );
    }

    #[test]
    fn other_requests_pass_unchanged() {
        for uri in [
            "http://api/api/v1/pods?watch=true&resourceVersion=0",
            "http://api/api/v1/pods?watch=true&resourceVersion=42&allowWatchBookmarks=true",
            "http://api/api/v1/pods?limit=500",
            "http://api/api/v1/pods",
        ] {
            assert_eq!(rewritten(uri), uri);
        }
    }
}
