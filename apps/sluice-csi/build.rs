//! Generates the CSI gRPC services and messages from the vendored spec
//! (proto/csi.proto) with protox, a protobuf compiler in Rust, so building needs no
//! `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    let descriptors = protox::compile(["csi.proto"], ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
