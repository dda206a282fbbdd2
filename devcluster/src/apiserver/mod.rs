//! The kube-apiserver-like HTTP server.
