package envoyemu

import (
	"crypto/rand"
	"time"

	"github.com/pdroute/pdroute/filter/abi/abispec"
)

// Envoy's WASI is a set of stubs (cpp-host src/exports.cc), not a real WASI:
// only stdout/stderr exist, and they go to the Envoy log. Envoy 1.33–1.38 link
// the 18 functions of abispec.WASIEnvoy133 (poll_oneoff answering ENOSYS);
// Envoy ≥ 1.39 (cpp-host PR #533) link the rest of the set below and
// poll_oneoff returns at once with no events.

// WASI errno values.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
	errnoNoent   = 44
	errnoNosys   = 52
	errnoNotdir  = 20
	errnoNotsup  = 58
)

// randomGetMax is cpp-host's PROXY_WASM_HOST_WASI_RANDOM_GET_MAX_SIZE_BYTES.
const randomGetMax = 64 << 10

// hostFn is a host function: its import key for restricted-callback checks,
// its wasm signature and its implementation (arguments and result in stack).
type hostFn struct {
	key    string
	sig    abispec.Func
	from39 bool // WASI stub added by cpp-host PR #533 (Envoy ≥ 1.39)
	impl   func(v *vm, s []uint64)
}

var (
	i32 = abispec.I32
	i64 = abispec.I64
)

func sig(name string, params ...abispec.ValueType) abispec.Func {
	return abispec.Func{Name: name, Params: params, Results: []abispec.ValueType{i32}}
}

// constErrno is a stub that always returns errno.
func constErrno(errno uint64) func(*vm, []uint64) {
	return func(_ *vm, s []uint64) { s[0] = errno }
}

// stdioOnly returns 0 for fd 1 and 2, BADF otherwise (cpp-host's no-op file stubs).
func stdioOnly(v *vm, s []uint64) {
	if fd := uint32(s[0]); fd == 1 || fd == 2 {
		s[0] = errnoSuccess
		return
	}
	s[0] = errnoBadf
}

// wasiFuncs is every WASI function Envoy can link, keyed by name.
var wasiFuncs = map[string]hostFn{}

func init() {
	strict := map[string]func(*vm, []uint64){
		"fd_write":            wasiFdWrite,
		"fd_read":             constErrno(errnoNosys),
		"fd_seek":             wasiLogged("wasi_unstable fd_seek"),
		"fd_close":            wasiLogged("wasi_unstable fd_close"),
		"fd_fdstat_get":       wasiFdstatGet,
		"fd_fdstat_set_flags": constErrno(errnoNosys),
		"environ_get":         wasiEnvironGet,
		"environ_sizes_get":   wasiEnvironSizesGet,
		"args_get":            constErrno(errnoSuccess),
		"args_sizes_get":      wasiArgsSizesGet,
		"clock_time_get":      wasiClockTimeGet,
		"random_get":          wasiRandomGet,
		"sched_yield":         constErrno(errnoSuccess),
		"poll_oneoff":         wasiPollOneoff,
		"proc_exit":           wasiProcExit,
		"path_open":           constErrno(errnoNoent),
		"fd_prestat_get":      constErrno(errnoBadf),
		"fd_prestat_dir_name": constErrno(errnoNosys),
	}
	for _, f := range abispec.WASIEnvoy133 {
		impl, ok := strict[f.Name]
		if !ok {
			panic("envoyemu: no WASI implementation for " + f.Name)
		}
		wasiFuncs[f.Name] = hostFn{key: "wasi." + f.Name, sig: f, impl: impl}
	}
	// The stubs of cpp-host #533, with its signatures (path_link and
	// path_symlink have one parameter fewer than WASI preview1 there, so a
	// module importing the standard form fails to link on Envoy too).
	add := func(f abispec.Func, impl func(*vm, []uint64)) {
		wasiFuncs[f.Name] = hostFn{key: "wasi." + f.Name, sig: f, from39: true, impl: impl}
	}
	add(sig("fd_fdstat_set_rights", i32, i64, i64), stdioOnly)
	add(sig("clock_res_get", i32, i32), wasiClockResGet)
	add(sig("fd_advise", i32, i64, i64, i32), constErrno(errnoSuccess))
	add(sig("fd_allocate", i32, i64, i64), stdioOnly)
	add(sig("fd_datasync", i32), stdioOnly)
	add(sig("fd_filestat_set_size", i32, i64), stdioOnly)
	add(sig("fd_filestat_set_times", i32, i64, i64, i32), stdioOnly)
	add(sig("fd_pread", i32, i32, i32, i64, i32), constErrno(errnoNosys))
	add(sig("fd_pwrite", i32, i32, i32, i64, i32), wasiFdPwrite)
	add(sig("fd_readdir", i32, i32, i32, i64, i32), wasiZeroOutThen(4, errnoNotdir))
	add(sig("fd_renumber", i32, i32), wasiFdRenumber)
	add(sig("fd_sync", i32), stdioOnly)
	add(sig("fd_tell", i32, i32), wasiFdTell)
	add(sig("path_create_directory", i32, i32, i32), constErrno(errnoNotsup))
	add(sig("path_filestat_set_times", i32, i32, i32, i32, i64, i64, i32), constErrno(errnoNotsup))
	add(sig("path_link", i32, i32, i32, i32, i32, i32), constErrno(errnoNotsup))
	add(sig("path_readlink", i32, i32, i32, i32, i32, i32), wasiZeroOutThen(5, errnoNotsup))
	add(sig("path_remove_directory", i32, i32, i32), constErrno(errnoNotsup))
	add(sig("path_rename", i32, i32, i32, i32, i32, i32), constErrno(errnoNotsup))
	add(sig("path_symlink", i32, i32, i32, i32), constErrno(errnoNotsup))
	add(sig("path_unlink_file", i32, i32, i32), constErrno(errnoNotsup))
	add(sig("sock_accept", i32, i32, i32), wasiSockAccept)
	add(sig("sock_recv", i32, i32, i32, i32, i32, i32), wasiSockRecv)
	add(sig("sock_send", i32, i32, i32, i32, i32), wasiZeroOutThen(4, errnoNotsup))
	add(sig("sock_shutdown", i32, i32), constErrno(errnoNotsup))
	add(sig("path_filestat_get", i32, i32, i32, i32, i32), constErrno(errnoNotsup))
	add(sig("fd_filestat_get", i32, i32), constErrno(errnoBadf))
}

// writev is cpp-host's writevImpl: fd 1 logs at INFO, fd 2 at ERROR, with one
// trailing newline trimmed.
func writev(v *vm, fd, iovs, iovsLen uint32) (written uint32, errno uint64) {
	var level LogLevel
	switch fd {
	case 1:
		level = LevelInfo
	case 2:
		level = LevelError
	default:
		return 0, errnoBadf
	}
	var msg []byte
	for i := uint32(0); i < iovsLen; i++ {
		iov, ok := v.read(iovs+i*8, 8)
		if !ok {
			return 0, errnoFault
		}
		ptr, n := le32(iov[0:4]), le32(iov[4:8])
		if n == 0 {
			continue
		}
		b, ok := v.read(ptr, n)
		if !ok {
			return 0, errnoFault
		}
		msg = append(msg, b...)
	}
	if len(msg) > 0 {
		written = uint32(len(msg))
		if msg[len(msg)-1] == '\n' {
			msg = msg[:len(msg)-1]
		}
		v.logFromGuest(v.effectiveContext(), level, string(msg), true)
	}
	return written, errnoSuccess
}

func wasiFdWrite(v *vm, s []uint64) {
	n, errno := writev(v, uint32(s[0]), uint32(s[1]), uint32(s[2]))
	if errno != errnoSuccess {
		s[0] = errno
		return
	}
	if !v.writeU32(uint32(s[3]), n) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiFdPwrite(v *vm, s []uint64) {
	fd := uint32(s[0])
	if fd != 1 && fd != 2 {
		s[0] = errnoBadf
		return
	}
	n, errno := writev(v, fd, uint32(s[1]), uint32(s[2]))
	if errno != errnoSuccess {
		s[0] = errno
		return
	}
	if !v.writeU32(uint32(s[4]), n) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

// wasiLogged is a stub that logs (at trace, like Context::error) and returns 0.
func wasiLogged(msg string) func(*vm, []uint64) {
	return func(v *vm, s []uint64) {
		v.proc.logf(LevelTrace, v.name, "%s", msg)
		s[0] = errnoSuccess
	}
}

func wasiFdstatGet(v *vm, s []uint64) {
	fd, out := uint32(s[0]), uint32(s[1])
	if fd != 1 && fd != 2 {
		s[0] = errnoBadf
		return
	}
	var stat [24]byte
	stat[8] = 64 // fs_rights_base = __WASI_RIGHTS_FD_WRITE
	v.mem.Write(out, stat[:])
	s[0] = errnoSuccess
}

func wasiEnviron(v *vm) [][2]string {
	if v.spec == nil {
		return nil
	}
	return v.spec.Env
}

func wasiEnvironGet(v *vm, s []uint64) {
	arr, buf := uint32(s[0]), uint32(s[1])
	for _, e := range wasiEnviron(v) {
		if !v.writeU32(arr, buf) {
			s[0] = errnoFault
			return
		}
		data := append(append(append([]byte(e[0]), '='), e[1]...), 0)
		if !v.mem.Write(buf, data) {
			s[0] = errnoFault
			return
		}
		buf += uint32(len(data))
		arr += 4
	}
	s[0] = errnoSuccess
}

func wasiEnvironSizesGet(v *vm, s []uint64) {
	env := wasiEnviron(v)
	size := 0
	for _, e := range env {
		size += len(e[0]) + len(e[1]) + 2
	}
	if !v.writeU32(uint32(s[0]), uint32(len(env))) || !v.writeU32(uint32(s[1]), uint32(size)) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiArgsSizesGet(v *vm, s []uint64) {
	if !v.writeU32(uint32(s[0]), 0) || !v.writeU32(uint32(s[1]), 0) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

// processStart anchors the monotonic clock (Envoy's steady clock).
var processStart = time.Now()

func wasiClockTimeGet(v *vm, s []uint64) {
	var t uint64
	switch uint32(s[0]) {
	case 0:
		t = uint64(time.Now().UnixNano())
	case 1:
		t = uint64(time.Since(processStart).Nanoseconds())
	default:
		s[0] = errnoNotsup
		return
	}
	if !v.writeU64(uint32(s[2]), t) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiClockResGet(v *vm, s []uint64) {
	switch uint32(s[0]) {
	case 0, 1:
	default:
		s[0] = errnoNotsup
		return
	}
	if !v.writeU64(uint32(s[1]), 1) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiRandomGet(v *vm, s []uint64) {
	ptr, n := uint32(s[0]), uint32(s[1])
	if n > randomGetMax {
		s[0] = errnoInval
		return
	}
	if n == 0 {
		s[0] = errnoSuccess
		return
	}
	buf := make([]byte, n)
	rand.Read(buf)
	if !v.mem.Write(ptr, buf) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

// wasiPollOneoff is the profile difference that matters most to Go: before
// Envoy 1.39 it fails with ENOSYS (the Go runtime then throws, trapping the
// VM); from 1.39 it reports zero events at once (a sleep becomes a busy wait).
func wasiPollOneoff(v *vm, s []uint64) {
	if v.m.version.StrictWASI() {
		s[0] = errnoNosys
		return
	}
	if !v.writeU32(uint32(s[3]), 0) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

// wasiProcExit logs and returns: Envoy does not terminate the VM.
func wasiProcExit(v *vm, s []uint64) {
	v.proc.logf(LevelTrace, v.name, "wasi_unstable proc_exit")
}

// wasiZeroOutThen writes a zero word to the out-pointer argument at index out,
// then returns errno (cpp-host's fd_readdir, path_readlink, sock_send stubs).
func wasiZeroOutThen(out int, errno uint64) func(*vm, []uint64) {
	return func(v *vm, s []uint64) {
		if !v.writeU32(uint32(s[out]), 0) {
			s[0] = errnoFault
			return
		}
		s[0] = errno
	}
}

func wasiFdRenumber(v *vm, s []uint64) {
	fd, to := uint32(s[0]), uint32(s[1])
	if (fd != 1 && fd != 2) || (to != 1 && to != 2) {
		s[0] = errnoBadf
		return
	}
	s[0] = errnoNotsup
}

func wasiFdTell(v *vm, s []uint64) {
	if fd := uint32(s[0]); fd != 1 && fd != 2 {
		s[0] = errnoBadf
		return
	}
	if !v.writeU64(uint32(s[1]), 0) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoSuccess
}

func wasiSockAccept(v *vm, s []uint64) {
	if !v.writeU64(uint32(s[2]), 0) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoNotsup
}

func wasiSockRecv(v *vm, s []uint64) {
	if !v.writeU32(uint32(s[4]), 0) || !v.mem.WriteUint16Le(uint32(s[5]), 0) {
		s[0] = errnoFault
		return
	}
	s[0] = errnoNotsup
}
