//go:build !unix

package envoyemu

import "github.com/tetratelabs/wazero/experimental"

// reservedMemory is wazero's default (see memory_unix.go).
var reservedMemory experimental.MemoryAllocator
