"""shmbus-producer's synthetic message format (tools/common/synthetic.hpp),
in Python: a test can check what the C++ producer wrote and write what
shmbus-consumer --verify accepts."""
import struct

_M = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_GOLDEN = 0x9E3779B97F4A7C15
HEADER = 24


def _fmix64(k):
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M
    k ^= k >> 33
    return k


def _step(h, w):
    return ((h ^ w) * _FNV_PRIME) & _M


def checksum(payload):
    """The checksum of the fixed part and the length (the filler is checked by regenerating it)."""
    seq, send_ns = struct.unpack_from("<QQ", payload, 0)
    return _fmix64(_step(_step(_step(_FNV_OFFSET, len(payload)), seq), send_ns))


def make(seq, size, send_ns=0):
    """The synthetic message `seq` of `size` bytes."""
    seed = _fmix64((seq * _GOLDEN + 1) & _M)
    n = size - HEADER
    words = (n + 7) // 8
    filler = b"".join(((seed + i * _GOLDEN) & _M).to_bytes(8, "little") for i in range(words))[:n]
    head = struct.pack("<QQ", seq, send_ns)
    return head + struct.pack("<Q", checksum(head + b"\0" * 8 + filler)) + filler


def is_valid(payload, seq):
    """True if `payload` is exactly the synthetic message `seq` as written."""
    got_seq, send_ns, got_sum = struct.unpack_from("<QQQ", payload, 0)
    return got_seq == seq and got_sum == checksum(payload) and bytes(payload) == make(seq, len(payload), send_ns)
