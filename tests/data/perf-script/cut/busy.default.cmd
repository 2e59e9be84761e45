# sidecar for busy.default.txt
# host: Debian GNU/Linux 12 (bookworm) VM, kernel 6.18.44-fc-v1252, perf version 6.1.187, 2 CPUs, no hardware PMU (cpu-clock)
# recorded: 2026-12-05T01:11:31Z
build_cmd: gcc -O1 -fno-omit-frame-pointer -pthread -o busy busy.c   (gcc (Debian 12.2.0-14+deb12u1) 12.2.0)
record_cmd: perf record -q -g -F 99 -o cut.data -- ./busy
script_cmd: perf script -i cut.data > busy.default.txt
samples: 46
bytes: 11932
