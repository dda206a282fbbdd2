//! Compiles the fleet protocol with protoc (Debian: protobuf-compiler).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/flotilla/v1/fleet.proto");
    tonic_prost_build::configure()
        // Objects travel as JSON bytes; Bytes lets the coordinator hand its cached serialization to
        // every Assign without copying it.
        .bytes(".")
        .compile_protos(&["proto/flotilla/v1/fleet.proto"], &["proto"])?;
    Ok(())
}
