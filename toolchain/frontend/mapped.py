"""Large ONNX files read without copying their weights: the model's structure is parsed,
its large tensors are memory-mapped from the file.

``onnx.load`` reads the whole file and protobuf parses it into a second copy: BERT-base
(434 MB of weights) took 884 MiB before Kiln had done anything, and every weight lived
in anonymous memory until the end of the compile, next to its packed copy. For a large
file (:data:`MAP_FILE_BYTES`) Kiln instead

1. walks the protobuf wire format of ``ModelProto.graph.initializer`` with
   :func:`scan_fields` (only field numbers and lengths: no payload is copied), and
   parses everything except the large ``raw_data`` payloads with protobuf itself;
2. records each large initializer as *external data in the model file itself*
   (``location`` = the file's name, ``offset``, ``length``: the ONNX convention for
   weights stored beside a model), so that the frontend treats it exactly like a tensor
   of a model saved with external data, under the same folder rule;
3. maps each such tensor (and each large tensor of a real external-data file) with
   :func:`map_tensor`: a read-only view of a ``mmap`` of the file.

A mapped weight costs resident memory only while its pages are touched, and those pages
are clean copies of the file: :func:`release_mapped_pages` drops them
(``MADV_DONTNEED``), and a later read faults them in again from the page cache, with the
same bytes. The compiler calls it after each kernel is scheduled (its weights are packed
by then) and after the weights are written, so the only anonymous copy of a weight is
the packed one. A model file must not be truncated or rewritten in place while a
compile reads it (a mapped page of a truncated file cannot be read).

Example (a file with one 64 KiB initializer)::

    >>> import os, tempfile, numpy as np, onnx
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> w = numpy_helper.from_array(np.arange(16384, dtype=np.float32), "w")
    >>> g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16384])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16384])], [w])
    >>> path = os.path.join(tempfile.mkdtemp(), "m.onnx")
    >>> onnx.save(helper.make_model(g), path)
    >>> skeleton = parse_skeleton(path, min_tensor_bytes=4096)
    >>> t = skeleton.graph.initializer[0]
    >>> t.HasField("raw_data"), {e.key: e.value for e in t.external_data}["location"]
    (False, 'm.onnx')
    >>> info = {e.key: int(e.value) for e in t.external_data if e.key != "location"}
    >>> a = map_tensor(path, info["offset"], info["length"], "float32", (16384,))
    >>> float(a[12345]), a.flags.writeable
    (12345.0, False)
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Iterator

import numpy as np
import onnx

#: a model file at least this large has its large initializers mapped, not parsed
MAP_FILE_BYTES = 64 << 20
#: ... those whose raw data has at least this many bytes
MAP_TENSOR_BYTES = 64 << 10

# protobuf field numbers (onnx.proto): ModelProto.graph, GraphProto.initializer,
# TensorProto.raw_data
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_LEN = 2  # the length-delimited wire type

#: the open map of each file, by (real path, size, modification time): one map a file,
#: found again by :func:`release_mapped_pages` (weak: a map closes when the last array
#: viewing it is gone; a rewritten file gets a new one)
_MAPS: weakref.WeakValueDictionary[tuple[str, int, int], mmap.mmap] = \
    weakref.WeakValueDictionary()


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message (the caller falls back to a full
    parse, which reports the problem to the user)."""


def _varint(buf: mmap.mmap | bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError(f"varint runs past byte {end}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def scan_fields(buf: mmap.mmap | bytes, start: int, end: int
                ) -> Iterator[tuple[int, int, int, int, int]]:
    """The fields of the protobuf message in ``buf[start:end]``, in order, as
    ``(field number, wire type, field start, payload start, field end)``; only the keys
    and lengths are read.

    >>> msg = bytes([0x08, 0x07, 0x12, 0x02, 0x61, 0x62])  # 1: varint 7, 2: bytes "ab"
    >>> list(scan_fields(msg, 0, len(msg)))
    [(1, 0, 0, 1, 2), (2, 2, 2, 4, 6)]
    """
    pos = start
    while pos < end:
        begin = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        payload = pos
        if wire == 0:
            _, pos = _varint(buf, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == _LEN:
            n, payload = _varint(buf, pos, end)
            pos = payload + n
        elif wire == 5:
            pos += 4
        else:
            raise WireError(f"wire type {wire} at byte {begin}")
        if number == 0 or pos > end:
            raise WireError(f"field at byte {begin} runs past byte {end}")
        yield number, wire, begin, payload, pos


def parse_skeleton(path: str | os.PathLike[str], min_tensor_bytes: int | None = None
                   ) -> onnx.ModelProto:
    """The ``ModelProto`` of the file at ``path`` with every initializer whose raw data has
    at least ``min_tensor_bytes`` (None: :data:`MAP_TENSOR_BYTES`) bytes turned into a
    reference to those bytes in the file (see the module's doc). Raises
    :class:`WireError` where the file's framing is not protobuf's and
    ``google.protobuf.message.DecodeError`` where a part does not parse."""
    location = os.path.basename(path)
    least = MAP_TENSOR_BYTES if min_tensor_bytes is None else min_tensor_bytes
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        size = len(buf)
        model_parts: list[bytes] = []
        graphs = []
        for number, wire, begin, payload, end in scan_fields(buf, 0, size):
            if number == _MODEL_GRAPH and wire == _LEN:
                graphs.append((payload, end))
            else:
                model_parts.append(buf[begin:end])
        if len(graphs) != 1:  # protobuf would merge several: let it
            raise WireError(f"{len(graphs)} graph fields")
        graph_parts: list[bytes] = []
        tensors: list[onnx.TensorProto] = []
        for number, wire, begin, payload, end in scan_fields(buf, *graphs[0]):
            if number != _GRAPH_INITIALIZER or wire != _LEN:
                graph_parts.append(buf[begin:end])
                continue
            parts, raw = [], None
            for n, w, b, p, e in scan_fields(buf, payload, end):
                if n == _TENSOR_RAW_DATA and w == _LEN and e - p >= least:
                    raw = (p, e - p)
                else:
                    parts.append(buf[b:e])
            t = onnx.TensorProto.FromString(b"".join(parts))
            if raw is not None and t.data_location == onnx.TensorProto.DEFAULT:
                t.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", location), ("offset", raw[0]),
                                   ("length", raw[1])):
                    entry = t.external_data.add()
                    entry.key, entry.value = key, str(value)
            elif raw is not None:  # raw data *and* external data: let protobuf keep both
                t = onnx.TensorProto.FromString(buf[payload:end])
            tensors.append(t)
    model = onnx.ModelProto.FromString(b"".join(model_parts))
    model.graph.MergeFromString(b"".join(graph_parts))
    model.graph.initializer.extend(tensors)
    return model


#: ONNX element types whose raw data is the little-endian numpy array itself
_RAW_DTYPES = frozenset({"float32", "float64", "float16", "int8", "uint8", "int16", "uint16",
                         "int32", "uint32", "int64", "uint64", "bool"})


def mappable(dtype: str) -> bool:
    """Whether a tensor of Kiln ``dtype`` can be viewed straight from its raw bytes."""
    return dtype in _RAW_DTYPES


def map_tensor(path: str | os.PathLike[str], offset: int, length: int, dtype: str,
               dims: tuple[int, ...]) -> np.ndarray:
    """A read-only array viewing ``length`` bytes at ``offset`` of the file at ``path``
    (which the caller has checked is long enough) as ``dtype[dims]``."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    buf = _MAPS.get(key)
    if buf is None:
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        _MAPS[key] = buf
    count = int(np.prod(dims, dtype=np.int64))
    arr = np.frombuffer(buf, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                        offset=offset)
    if arr.nbytes != length:
        raise ValueError(f"{length} bytes hold no {dtype}{list(dims)}")
    return arr.reshape(dims)


def release_mapped_pages() -> None:
    """Drop the resident pages of every mapped model file from this process (they are
    read again from the page cache when touched; see the module's doc)."""
    for buf in list(_MAPS.values()):
        try:
            buf.madvise(mmap.MADV_DONTNEED)
        except (AttributeError, OSError, ValueError):  # no madvise here, or closed
            pass
