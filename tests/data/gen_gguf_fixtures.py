#!/usr/bin/env python3
"""Reference data for rlx's GGUF and quantization tests, from the `gguf` PyPI package.

  gen_gguf_fixtures.py OUTDIR
      Writes OUTDIR/dequant.gguf: for every type the package can dequantize,
        <type>.q    random blocks (random bytes, but the f16/e8m0 scale fields set to
                    finite values of magnitude 1e-3..1e-1, so no NaN or inf appears)
        <type>.ref  the package's f32 dequantization of <type>.q
      and OUTDIR/quantize.gguf: for every type the package can quantize,
        <type>.src     f32 input (normal noise, one all-zero row)
        <type>.pyq     the package's quantization of <type>.src
        <type>.pyq_ref the package's dequantization of <type>.pyq
  gen_gguf_fixtures.py --describe FILE [--data]
      Prints, as JSON, what the package's GGUFReader sees in FILE: version, alignment,
      metadata (key, types, value) and tensors (name, type id, ne, absolute offset,
      nbytes, and with --data the bytes as hex).
  gen_gguf_fixtures.py --sample-rows FILE OUTDIR ROWS
      For a large file (parsed once): writes OUTDIR/describe.json as above but without
      metadata values, and for every tensor dequantizes up to ROWS rows (the first, the
      last and evenly spaced ones between) with the package: OUTDIR/rows.json lists the
      row indices per tensor, OUTDIR/rows.bin holds their f32 values in that order.
"""
import json
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

RNG = np.random.default_rng(1234)
ROWS = 4
BLOCKS_PER_ROW = 2

# Byte offsets of the f16 scale fields within one block, per type (ggml-common.h).
F16_SCALES = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ4_NL: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
}


def realistic_f16(n: int) -> np.ndarray:
    mag = 10.0 ** RNG.uniform(-3, -1, n)
    sign = RNG.choice([-1.0, 1.0], n)
    return (mag * sign).astype(np.float16)


def random_blocks(qtype: T, n_blocks: int) -> np.ndarray:
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    if qtype in (T.F32, T.F16, T.BF16, T.F64):
        vals = RNG.normal(size=n_blocks).astype(np.float32)
        if qtype == T.F16:
            return vals.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
        if qtype == T.F64:
            return vals.astype(np.float64).view(np.uint8).reshape(n_blocks, 8)
        if qtype == T.BF16:
            return (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
        return vals.view(np.uint8).reshape(n_blocks, 4)
    b = RNG.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_SCALES.get(qtype, []):
        b[:, off:off + 2] = realistic_f16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if qtype == T.IQ1_M:
        # The f16 scale is split into the top nibbles of the four u16 scale words.
        d = realistic_f16(n_blocks).view(np.uint16)
        sc = b[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
        b[:, 48:56] = sc.view(np.uint8)
    if qtype == T.MXFP4:
        b[:, 0] = RNG.integers(117, 124, size=n_blocks)  # 2^-11 .. 2^-5 (e8m0, halved)
    return b


def gen_fixtures(outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(outdir / "dequant.gguf"), arch="rlx-fixtures")
    names = []
    for qtype in T:
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        raw = random_blocks(qtype, ROWS * BLOCKS_PER_ROW).reshape(ROWS, -1)
        try:
            ref = quants.dequantize(raw, qtype)
        except NotImplementedError:
            continue
        ref = np.ascontiguousarray(ref, dtype=np.float32)
        assert np.isfinite(ref).all(), qtype.name
        name = qtype.name.lower()
        w.add_tensor(f"{name}.q", raw, raw_dtype=qtype)
        w.add_tensor(f"{name}.ref", ref)
        names.append(name)
    w.add_array("fixture.types", names)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    w = gguf.GGUFWriter(str(outdir / "quantize.gguf"), arch="rlx-fixtures")
    names = []
    src = RNG.normal(size=(ROWS, 256)).astype(np.float32)
    src[1] = 0.0
    for qtype in T:
        if qtype in (T.F32, T.F16) or qtype not in quants._type_traits:
            continue
        try:
            q = quants.quantize(src, qtype)
        except NotImplementedError:
            continue
        name = qtype.name.lower()
        w.add_tensor(f"{name}.src", src)
        w.add_tensor(f"{name}.pyq", q, raw_dtype=qtype)
        w.add_tensor(f"{name}.pyq_ref", np.ascontiguousarray(quants.dequantize(q, qtype), dtype=np.float32))
        names.append(name)
    w.add_array("fixture.types", names)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def describe(r: gguf.GGUFReader, with_data: bool, with_values: bool) -> dict:
    meta = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's pseudo-fields for the header
        entry = {"key": key, "types": [int(t) for t in field.types]}
        if with_values:
            entry["value"] = field.contents()
        meta.append(entry)
    tensors = []
    for t in r.tensors:
        entry = {
            "name": t.name,
            "type": int(t.tensor_type),
            "ne": [int(x) for x in t.shape],
            "offset": int(t.data_offset),
            "nbytes": int(t.n_bytes),
        }
        if with_data:
            entry["hex"] = np.ascontiguousarray(t.data).view(np.uint8).tobytes().hex()
        tensors.append(entry)
    version = int(r.fields["GGUF.version"].contents())
    return {"version": version, "alignment": int(r.alignment), "data_offset": int(r.data_offset),
            "metadata": meta, "tensors": tensors}


def sample_rows(path: str, outdir: Path, max_rows: int) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    r = gguf.GGUFReader(path)
    (outdir / "describe.json").write_text(json.dumps(describe(r, with_data=False, with_values=False)))
    index = []
    with open(outdir / "rows.bin", "wb") as out:
        for t in r.tensors:
            ne0 = int(t.shape[0])
            n_rows = int(np.prod([int(x) for x in t.shape])) // ne0
            rows = sorted(set(np.linspace(0, n_rows - 1, min(max_rows, n_rows)).round().astype(int).tolist()))
            data = np.ascontiguousarray(t.data).view(np.uint8)
            data = data.reshape(n_rows, data.size // n_rows)
            vals = quants.dequantize(data[rows], t.tensor_type).astype(np.float32)
            out.write(np.ascontiguousarray(vals).tobytes())
            index.append({"name": t.name, "rows": rows, "row_len": ne0})
    (outdir / "rows.json").write_text(json.dumps(index))


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--describe":
        json.dump(describe(gguf.GGUFReader(args[1]), "--data" in args[2:], with_values=True), sys.stdout)
    elif args and args[0] == "--sample-rows":
        sample_rows(args[1], Path(args[2]), int(args[3]))
    elif len(args) == 1:
        gen_fixtures(Path(args[0]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
