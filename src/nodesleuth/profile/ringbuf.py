"""The kernel's perf ring buffers: one cpu-clock sampling event per online CPU opened with
perf_event_open(2) (pid -1, frequency mode, the sample type `perf record -g` uses:
IP|TID|TIME|CALLCHAIN|CPU|PERIOD, CLOCK_MONOTONIC timestamps, side-band MMAP2/COMM/FORK/EXIT
records), each with its mmap'ed ring, copied out as whole records (profile/decode.py decodes them).
Kept apart from decoding so that what needs root and a kernel is small and the rest is testable on bytes.

Needs: Linux on x86_64 (the ring's head is read without a barrier, which x86's ordering allows),
perf_event_open allowed for system-wide events (root, CAP_PERFMON or CAP_SYS_ADMIN, or
kernel.perf_event_paranoid <= 0), and the rings' memory lockable (CAP_IPC_LOCK or under
kernel.perf_event_mlock_kb); else Unavailable says why.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import struct

from ..model.procfs import parse_cpu_list
from ..node.root import Root

# include/uapi/linux/perf_event.h
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
S_IP, S_TID, S_TIME, S_CALLCHAIN, S_CPU, S_PERIOD = 0x1, 0x2, 0x4, 0x20, 0x80, 0x100
SAMPLE_TYPE = S_IP | S_TID | S_TIME | S_CALLCHAIN | S_CPU | S_PERIOD
(F_DISABLED, F_MMAP, F_COMM, F_FREQ, F_TASK, F_WATERMARK, F_SAMPLE_ID_ALL, F_MMAP2, F_COMM_EXEC,
 F_USE_CLOCKID) = (1 << 0, 1 << 8, 1 << 9, 1 << 10, 1 << 13, 1 << 14, 1 << 18, 1 << 23, 1 << 24, 1 << 25)
ATTR = struct.Struct("<IIQQQQQIIQQQQIiQIHH")  # perf_event_attr up to sample_max_stack: 112 bytes (VER5)
PERF_FLAG_FD_CLOEXEC = 8
IOC_ENABLE, IOC_DISABLE = 0x2400, 0x2401
NR_PERF_EVENT_OPEN = {"x86_64": 298}
CLOCK_MONOTONIC = 1
# records
MMAP, LOST, COMM, EXIT, FORK, SAMPLE, MMAP2 = 1, 2, 3, 4, 7, 9, 10
COMM_EXEC = 1 << 13
CONTEXT_HV, CONTEXT_KERNEL, CONTEXT_USER, CONTEXT_MAX = 2**64 - 32, 2**64 - 128, 2**64 - 512, 2**64 - 4095
META_HEAD, META_TAIL = 1024, 1032  # data_head / data_tail in struct perf_event_mmap_page
U64 = struct.Struct("<Q")


class Unavailable(Exception):
    """The direct path cannot run here; the message says why (the runner falls back to perf record)."""


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return list(range(os.cpu_count() or 1))
    return parse_cpu_list(text, path)


def online_cpus_from(text: str) -> list[int]:
    return parse_cpu_list(text, "the CPU list")


def read_setting(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


class Rings:
    """One cpu-clock sampling event per CPU with its mmap'ed ring buffer."""

    def __init__(self, cpus: list[int], freq: int, pages: int, max_stack: int = 127, root: Root = Root("/")):
        self.sysctl = root.join("/proc/sys/kernel")  # for the reasons it gives
        if platform.machine() not in NR_PERF_EVENT_OPEN:
            raise Unavailable(f"the direct reader supports x86_64 only (this is {platform.machine()})")
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long
        self.nr = NR_PERF_EVENT_OPEN[platform.machine()]
        self.page = mmap.PAGESIZE
        self.pages = pages
        self.size = pages * self.page
        self.fds: list[int] = []
        self.maps: list[mmap.mmap] = []
        self.cpus: list[int] = []
        self.tails: list[int] = []
        flags = (F_DISABLED | F_MMAP | F_COMM | F_FREQ | F_TASK | F_WATERMARK | F_SAMPLE_ID_ALL | F_MMAP2
                 | F_COMM_EXEC | F_USE_CLOCKID)
        attr = ATTR.pack(PERF_TYPE_SOFTWARE, ATTR.size, PERF_COUNT_SW_CPU_CLOCK, freq, SAMPLE_TYPE, 0, flags,
                         self.size // 2, 0, 0, 0, 0, 0, 0, CLOCK_MONOTONIC, 0, 0, max_stack, 0)
        self.attr = ctypes.create_string_buffer(attr, ATTR.size)
        try:
            for cpu in cpus:
                fd = self.libc.syscall(self.nr, self.attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
                if fd < 0:
                    e = ctypes.get_errno()
                    if e == errno.ENODEV and len(cpus) > 1:
                        continue  # went offline meanwhile
                    raise Unavailable(self._why(e, read_setting(self.sysctl + "/perf_event_paranoid")))
                self.fds.append(fd)
                try:
                    m = mmap.mmap(fd, self.page + self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                except OSError as ex:
                    raise Unavailable(f"cannot map a {self.size // 1024} KB perf ring per CPU ({ex.strerror}; "
                                      f"kernel.perf_event_mlock_kb={read_setting(self.sysctl + '/perf_event_mlock_kb')}"
                                      ", no CAP_IPC_LOCK?)") from None
                self.maps.append(m)
                self.cpus.append(cpu)
                self.tails.append(0)
            if not self.fds:
                raise Unavailable("no online CPU could be sampled")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _why(e: int, para: str) -> str:
        if e in (errno.EACCES, errno.EPERM):
            return (f"perf_event_open refused a system-wide event ({os.strerror(e)}; kernel.perf_event_paranoid="
                    f"{para}: needs root, CAP_PERFMON or a paranoid level <= 0)")
        if e == errno.ENOENT or e == errno.ENOSYS:
            return f"no perf events in this kernel ({os.strerror(e)})"
        if e == errno.EINVAL:
            return "the kernel refused the event's attributes (EINVAL: too old for use_clockid/mmap2?)"
        if e == errno.EMFILE:
            return "too many open files for one event per CPU (EMFILE)"
        return f"perf_event_open failed: {os.strerror(e)}"

    def ioctl_all(self, req: int) -> None:
        import fcntl

        for fd in self.fds:
            fcntl.ioctl(fd, req, 0)

    def read(self, i: int) -> bytes:
        """Everything the kernel wrote into ring i since the last read; the space is handed back."""
        m = self.maps[i]
        head = U64.unpack_from(m, META_HEAD)[0]
        tail = self.tails[i]
        if head == tail:
            return b""
        size, base = self.size, self.page
        s, e = tail % size, head % size
        if head - tail >= size:  # cannot happen in the non-overwrite mode asked for; be safe
            s, e = e, e
        data = m[base + s:base + e] if s < e else m[base + s:base + size] + m[base:base + e]
        U64.pack_into(m, META_TAIL, head)
        self.tails[i] = head
        return data

    def close(self) -> None:
        for m in self.maps:
            try:
                m.close()
            except (BufferError, ValueError):
                pass
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.maps, self.fds = [], []


def ring_pages(freq: int, buffer_kb: int = 0) -> int:
    """Pages of ring per CPU: 32 (128 KB) at 49 Hz, more at higher rates, a power of two."""
    if buffer_kb:
        return 1 << max(0, (max(4, buffer_kb) // 4 - 1).bit_length())
    pages = 32
    while pages < 1024 and pages * 49 < 32 * freq:
        pages *= 2
    return pages
