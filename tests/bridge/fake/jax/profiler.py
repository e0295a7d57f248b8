"""jax.profiler.device_memory_profile() of the stand-in: the live arrays in
pprof's protobuf, gzip'd, shaped as XLA's heap profile is (sample types
allocations/count and space/bytes; labels kind = buffer | executable and
device = str(device); one location per frame, innermost first), so the
bridge's decoder reads the same bytes it reads from JAX."""
import gzip


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, value):
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _packed(number, values):
    return _field(number, b"".join(_varint(v) for v in values))


def device_memory_profile(backend=None):
    import jax
    strings = {"": 0}

    def s(text):
        return strings.setdefault(text, len(strings))

    body, locations, functions = [], {}, {}
    body.append(_field(1, _field(1, s("allocations")) + _field(2, s("count"))))
    body.append(_field(1, _field(1, s("space")) + _field(2, s("bytes"))))
    # An executable: the compiled program, counted with 0 bytes, no stack.
    body.append(_field(2, _packed(2, [1, 0]) + _field(3, _field(1, s("kind")) + _field(2, s("executable")))))
    for d in jax.local_devices():
        for a in list(d.live):
            ids = []
            for name, filename, line in a.stack:
                fn = functions.setdefault((name, filename), len(functions) + 1)
                ids.append(locations.setdefault((fn, line), len(locations) + 1))
            labels = (_field(3, _field(1, s("kind")) + _field(2, s("buffer"))) +
                      _field(3, _field(1, s("device")) + _field(2, s(str(d)))))
            body.append(_field(2, _packed(1, ids) + _packed(2, [1, a.nbytes]) + labels))
    for (fn, line), loc in locations.items():
        body.append(_field(4, _field(1, loc) + _field(4, _field(1, fn) + _field(2, line))))
    for (name, filename), fn in functions.items():
        body.append(_field(5, _field(1, fn) + _field(2, s(name)) + _field(3, s(name)) + _field(4, s(filename))))
    body.extend(_field(6, text.encode()) for text in strings)
    return gzip.compress(b"".join(body))
