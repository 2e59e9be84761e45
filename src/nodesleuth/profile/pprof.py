"""pprof export: a gzip-compressed `perftools.profiles.Profile` that `go tool pprof`, Grafana Pyroscope
and Parca read.

The message schema is the subset of google/pprof's proto/profile.proto (Apache-2.0) that a sampled CPU
profile needs, declared here as a descriptor and encoded by the protobuf library (no protoc step, no
generated file to keep in sync). Field numbers are profile.proto's. Each stack becomes a sample with
locations leaf first; the comm is the root frame (as in the folded output) and pid/cpu/comm labels
let pprof's -tagfocus narrow it.
"""

from __future__ import annotations

import gzip
from collections import Counter
from functools import lru_cache

import numpy as np

from .samples import Filter, Samples

_I64, _U64, _STR, _MSG, _BOOL = 3, 4, 9, 11, 8  # FieldDescriptorProto.Type
_OPT, _REP = 1, 3  # FieldDescriptorProto.Label

_SCHEMA = {  # message -> [(name, number, type, label, message type)]
    "Profile": [("sample_type", 1, _MSG, _REP, "ValueType"), ("sample", 2, _MSG, _REP, "Sample"),
                ("location", 4, _MSG, _REP, "Location"), ("function", 5, _MSG, _REP, "Function"),
                ("string_table", 6, _STR, _REP, None), ("time_nanos", 9, _I64, _OPT, None),
                ("duration_nanos", 10, _I64, _OPT, None), ("period_type", 11, _MSG, _OPT, "ValueType"),
                ("period", 12, _I64, _OPT, None), ("comment", 13, _I64, _REP, None),
                ("default_sample_type", 14, _I64, _OPT, None)],
    "ValueType": [("type", 1, _I64, _OPT, None), ("unit", 2, _I64, _OPT, None)],
    "Sample": [("location_id", 1, _U64, _REP, None), ("value", 2, _I64, _REP, None),
               ("label", 3, _MSG, _REP, "Label")],
    "Label": [("key", 1, _I64, _OPT, None), ("str", 2, _I64, _OPT, None), ("num", 3, _I64, _OPT, None),
              ("num_unit", 4, _I64, _OPT, None)],
    "Location": [("id", 1, _U64, _OPT, None), ("mapping_id", 2, _U64, _OPT, None), ("address", 3, _U64, _OPT, None),
                 ("line", 4, _MSG, _REP, "Line"), ("is_folded", 5, _BOOL, _OPT, None)],
    "Line": [("function_id", 1, _U64, _OPT, None), ("line", 2, _I64, _OPT, None)],
    "Function": [("id", 1, _U64, _OPT, None), ("name", 2, _I64, _OPT, None), ("system_name", 3, _I64, _OPT, None),
                 ("filename", 4, _I64, _OPT, None), ("start_line", 5, _I64, _OPT, None)],
}


@lru_cache(maxsize=1)
def _profile_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FileDescriptorProto(name="nodesleuth/pprof_profile.proto", package="perftools.profiles",
                                            syntax="proto3")
    for msg, fields in _SCHEMA.items():
        m = fd.message_type.add(name=msg)
        for name, num, typ, label, ref in fields:
            f = m.field.add(name=name, number=num, type=typ, label=label)
            if ref:
                f.type_name = f".perftools.profiles.{ref}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("perftools.profiles.Profile")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def build(s: Samples, f: Filter, freq_hz: float | None = None):
    """The Profile message of the selected samples (one sample per distinct comm, pid, cpu, stack)."""
    P = _profile_class()
    strings: dict[str, int] = {"": 0}

    def sid(x: str) -> int:
        return strings.setdefault(x, len(strings))

    p = P()
    p.sample_type.add(type=sid("samples"), unit=sid("count"))
    if freq_hz:
        p.sample_type.add(type=sid("cpu"), unit=sid("nanoseconds"))
        p.period_type.type, p.period_type.unit = sid("cpu"), sid("nanoseconds")
        p.period = int(1e9 / freq_hz)
    m = s.select(f)
    counts: Counter = Counter(zip(s.comm[m].tolist(), s.pid[m].tolist(), s.cpu[m].tolist(), s.stack[m].tolist()))
    funcs: dict[str, int] = {}
    k_pid, k_cpu, k_comm = sid("pid"), sid("cpu"), sid("comm")
    for (comm_i, pid, cpu, stack_i), n in sorted(counts.items()):
        comm = s.comms[comm_i]
        frames = (comm,) + s.stacks[stack_i]  # root first
        locs = []
        for fr in reversed(frames):  # pprof: leaf first
            fid = funcs.get(fr)
            if fid is None:
                fid = funcs[fr] = len(funcs) + 1
                name = fr[:-4] if fr.endswith("_[k]") else fr
                p.function.add(id=fid, name=sid(name), system_name=sid(fr),
                               filename=sid("[kernel.kallsyms]" if fr.endswith("_[k]") else ""))
                p.location.add(id=fid).line.add(function_id=fid)
            locs.append(fid)
        smp = p.sample.add(location_id=locs, value=[n] + ([int(n * 1e9 / freq_hz)] if freq_hz else []))
        smp.label.add(key=k_comm, str=sid(comm))
        smp.label.add(key=k_pid, num=int(pid))
        smp.label.add(key=k_cpu, num=int(cpu))
    if len(s.t[m]):
        t = s.t[m]
        p.time_nanos = int(float(np.min(t)) * 1e9)
        p.duration_nanos = int((float(np.max(t)) - float(np.min(t))) * 1e9)
    p.comment.append(sid("nodesleuth: perf samples; frames ending _[k] are kernel"))
    p.string_table.extend(sorted(strings, key=strings.get))
    return p


def encode(s: Samples, f: Filter, freq_hz: float | None = None) -> bytes:
    """gzip(serialized Profile): the on-disk form profile.proto prescribes."""
    return gzip.compress(build(s, f, freq_hz).SerializeToString(), mtime=0)
