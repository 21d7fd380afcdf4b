//! glommio: one LocalExecutor per thread pinned to its core, glommio's own
//! SO_REUSEPORT listener, one task per connection doing read -> write_all.

use std::net::SocketAddr;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};

use crate::common::{RequestParser, RECV_BUFFER_BYTES};

pub fn run(address: SocketAddr, threads: usize) {
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            LocalExecutorBuilder::new(Placement::Fixed(thread))
                .spawn(move || serve(address))
                .expect("glommio executor")
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

async fn serve(address: SocketAddr) {
    let listener = TcpListener::bind(address).expect("bind");
    loop {
        let Ok(stream) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        glommio::spawn_local(connection(stream)).detach();
    }
}

async fn connection(mut stream: glommio::net::TcpStream) {
    let mut parser = RequestParser::default();
    let mut recv_buffer = vec![0u8; RECV_BUFFER_BYTES];
    let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
    loop {
        let n = match stream.read(&mut recv_buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        out.clear();
        parser.consume(&recv_buffer[..n], &mut out);
        if out.is_empty() {
            continue;
        }
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
