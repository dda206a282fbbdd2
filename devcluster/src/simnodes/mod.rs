//! The kwok-like node simulator.
