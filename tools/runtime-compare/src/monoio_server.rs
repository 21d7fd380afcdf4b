//! monoio: one runtime per thread (io_uring driver), SO_REUSEPORT listener per
//! thread, one task per connection doing the idiomatic read -> write_all loop.

use std::net::SocketAddr;

use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{ListenerOpts, TcpListener};

use crate::common::{pin_to_core, RequestParser, RECV_BUFFER_BYTES};

pub fn run(address: SocketAddr, threads: usize) {
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            std::thread::spawn(move || {
                pin_to_core(thread);
                let mut runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                    .with_entries(1024)
                    .build()
                    .expect("monoio runtime");
                runtime.block_on(serve(address));
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

async fn serve(address: SocketAddr) {
    let listener =
        TcpListener::bind_with_config(address, &ListenerOpts::new().reuse_port(true)).expect("bind");
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        monoio::spawn(connection(stream));
    }
}

async fn connection(mut stream: monoio::net::TcpStream) {
    let mut parser = RequestParser::default();
    let mut recv_buffer: Vec<u8> = Vec::with_capacity(RECV_BUFFER_BYTES);
    let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
    loop {
        recv_buffer.clear();
        let (result, buffer) = stream.read(recv_buffer).await;
        recv_buffer = buffer;
        match result {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        out.clear();
        parser.consume(&recv_buffer, &mut out);
        if out.is_empty() {
            continue;
        }
        let (result, buffer) = stream.write_all(out).await;
        out = buffer;
        if result.is_err() {
            return;
        }
    }
}
