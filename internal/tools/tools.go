//go:build tools

// Package tools pins dependencies that packages under construction will use,
// so go.mod does not churn while several of them are written at once.
// Remove an import here once a real package imports it.
package tools

import (
	_ "github.com/go-zeromq/zmq4"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	_ "github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/proxytest"
	_ "github.com/tetratelabs/wazero"
	_ "github.com/tidwall/gjson"
	_ "github.com/tidwall/sjson"
	_ "github.com/tiktoken-go/tokenizer"
	_ "github.com/vmihailenco/msgpack/v5"
	_ "gopkg.in/yaml.v3"
)
