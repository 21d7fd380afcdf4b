#!/usr/bin/env python3
"""Generate small NVMe/TCP exchanges on 127.0.0.1 for the capture-check self-test.

    nvme_tcp_traffic.py PORT SCENARIO

A listener on PORT plays the controller, a client plays the host; both sides
write hand-built PDUs (NVMe/TCP 1.0 layouts) so that tshark, capturing on lo,
sees one connection per run. Scenarios:

  good        ICReq/ICResp with header+data digests, Identify Controller as a
              CapsuleCmd, 4 KiB C2HData (data digest), CapsuleResp; all digests right
  bad-digest  like good, but one CapsuleCmd carries a wrong header digest
  malformed   Identify whose C2HData claims 4096 bytes but carries 8 (dissector exception)
  termreq     the controller answers with a C2HTermReq
  bad-type    the host sends a PDU of reserved type 0x33
"""
import socket
import struct
import sys
import time

HDGST, DDGST = 0x01, 0x02
DATA_LAST = 0x04


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def ch(pdu_type, flags, hlen, pdo, plen):
    return struct.pack("<BBBBI", pdu_type, flags, hlen, pdo, plen)


def icreq(digests):
    return ch(0, 0, 128, 0, 128) + struct.pack("<HBBI", 0, 0, digests, 3) + bytes(112)


def icresp(digests):
    return ch(1, 0, 128, 0, 128) + struct.pack("<HBBI", 0, 0, digests, 131072) + bytes(112)


def with_hdgst(header: bytes, corrupt=False) -> bytes:
    digest = crc32c(header) ^ (0xDEADBEEF if corrupt else 0)
    return header + struct.pack("<I", digest)


def identify_capsule(cid, hdgst, corrupt=False):
    # SQE: opcode 0x06, PSDT=01 (SGL), CID; SGL1 = transport data block of 4096
    # bytes; CDW10 CNS=1 (controller)
    sqe = struct.pack("<BBHI", 0x06, 0x40, cid, 0) + bytes(16)
    sqe += struct.pack("<QIBBBB", 0, 4096, 0, 0, 0, 0x5A)
    sqe += struct.pack("<I", 1) + bytes(20)
    assert len(sqe) == 64
    flags = HDGST if hdgst else 0
    header = ch(4, flags, 72, 0, 72 + (4 if hdgst else 0)) + sqe
    return with_hdgst(header[:72], corrupt) if hdgst else header


def c2h_data(cid, data, hdgst, ddgst, claimed_len=None):
    flags = DATA_LAST | (HDGST if hdgst else 0) | (DDGST if ddgst else 0)
    pdo = 24 + (4 if hdgst else 0)
    plen = pdo + len(data) + (4 if ddgst else 0)
    datal = len(data) if claimed_len is None else claimed_len
    header = ch(7, flags, 24, pdo, plen) + struct.pack("<HHIII", cid, 0, 0, datal, 0)
    pdu = with_hdgst(header) if hdgst else header
    pdu += data
    if ddgst:
        pdu += struct.pack("<I", crc32c(data))
    return pdu


def capsule_resp(cid, hdgst):
    cqe = struct.pack("<IIHHHH", 0, 0, 0, 0, cid, 0)
    header = ch(5, HDGST if hdgst else 0, 24, 0, 24 + (4 if hdgst else 0)) + cqe
    return with_hdgst(header) if hdgst else header


def c2h_termreq(fes=1):
    # CH, FES (1 = invalid PDU header field), FEI, reserved; then the offending header
    header = ch(3, 0, 24, 0, 24 + 8) + struct.pack("<HI", fes, 0) + bytes(10)
    assert len(header) == 24
    return header + bytes(8)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def main():
    port, scenario = int(sys.argv[1]), sys.argv[2]
    digests = HDGST | DDGST if scenario in ("good", "bad-digest") else 0
    hd = bool(digests)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    host = socket.create_connection(("127.0.0.1", port))
    host.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ctrl, _ = srv.accept()
    ctrl.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pause = lambda: time.sleep(0.03)  # noqa: E731  (one PDU per segment, mostly)

    host.sendall(icreq(digests)); pause()
    recv_exact(ctrl, 128)
    ctrl.sendall(icresp(digests)); pause()
    recv_exact(host, 128)

    for cid in range(1, 4):
        corrupt = scenario == "bad-digest" and cid == 2
        host.sendall(identify_capsule(cid, hd, corrupt)); pause()
        ctrl.recv(65536)
        if scenario == "termreq":
            ctrl.sendall(c2h_termreq()); pause()
            break
        if scenario == "malformed":  # DATAL says 4096, the PDU carries 8 bytes
            ctrl.sendall(c2h_data(cid, bytes(8), hd, hd, claimed_len=4096)); pause()
        else:
            ctrl.sendall(c2h_data(cid, bytes(4096), hd, hd)); pause()
        ctrl.sendall(capsule_resp(cid, hd)); pause()
        host.recv(65536)
        if scenario == "bad-type":
            host.sendall(ch(0x33, 0, 8, 0, 8)); pause()
            ctrl.recv(65536)
            break
    host.close()
    ctrl.close()
    srv.close()
    time.sleep(0.1)


if __name__ == "__main__":
    main()
