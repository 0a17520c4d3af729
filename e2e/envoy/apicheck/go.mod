// The newest go-control-plane/envoy the module proxy serves (Envoy API v1.40); it needs
// Go 1.26, which the tests fetch through GOTOOLCHAIN (see main.go and envoy-1.35.mod).
module github.com/pdroute/pdroute/e2e/envoy/apicheck

go 1.26.0

toolchain go1.26.11

require (
	github.com/envoyproxy/go-control-plane/envoy v1.40.0
	google.golang.org/protobuf v1.36.12
)

require (
	cel.dev/expr v0.25.2 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260720211330-0afa2a65878a // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260720211330-0afa2a65878a // indirect
)
