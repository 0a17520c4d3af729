package envoyemu

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvoyVersion is the Envoy release the emulator imitates, 1.<Minor>. It picks
// the WASI profile (strict before 1.39) and which config fields exist. The zero
// value means DefaultEnvoyVersion.
type EnvoyVersion struct {
	Minor int
}

// DefaultEnvoyVersion is 1.35: the oldest Envoy pdroute supports (it needs
// PluginConfig.allow_on_headers_stop_iteration, added in 1.35) and, like
// every release before 1.39, the strictest WASI profile (poll_oneoff ENOSYS,
// small WASI set): a module that works here works on every later release.
// 1.33 and 1.34 stay selectable for modules that do not need the flag.
var DefaultEnvoyVersion = EnvoyVersion{Minor: 35}

// ParseEnvoyVersion parses "1.33", "1.39" or "1.36.2" (the patch is ignored).
// Versions before 1.33 are refused: they cannot run Go wasip1 modules.
func ParseEnvoyVersion(s string) (EnvoyVersion, error) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "1" {
		return EnvoyVersion{}, fmt.Errorf("envoy version %q: want 1.MINOR, e.g. 1.33 or 1.39", s)
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil || minor < 0 {
		return EnvoyVersion{}, fmt.Errorf("envoy version %q: bad minor version", s)
	}
	if minor < 33 {
		return EnvoyVersion{}, fmt.Errorf("envoy version %q: Go wasip1 modules need Envoy 1.33 or later", s)
	}
	return EnvoyVersion{Minor: minor}, nil
}

func (v EnvoyVersion) minor() int {
	if v.Minor == 0 {
		return DefaultEnvoyVersion.Minor
	}
	return v.Minor
}

// String returns "1.<minor>".
func (v EnvoyVersion) String() string { return fmt.Sprintf("1.%d", v.minor()) }

// AtLeast reports whether the version is 1.<minor> or later.
func (v EnvoyVersion) AtLeast(minor int) bool { return v.minor() >= minor }

// StrictWASI reports the Envoy 1.33–1.38 WASI profile (proxy-wasm-cpp-host
// before PR #533): poll_oneoff answers ENOSYS and only 18 WASI functions link.
func (v EnvoyVersion) StrictWASI() bool { return !v.AtLeast(39) }
