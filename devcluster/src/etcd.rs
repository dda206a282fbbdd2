//! An etcd process for tests and the demo.
