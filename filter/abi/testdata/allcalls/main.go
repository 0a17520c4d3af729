// Command allcalls is a wasm test module that reaches every host function the
// abi binding imports, so the build check sees all of them (the linker drops
// imports nothing calls). Each stream's request headers run every call once
// and log what came back; its behaviour is not meant for production.
package main

import (
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/pdroute/pdroute/filter/abi"
)

func main() {}

func init() { abi.SetVMContext(&vmContext{}) }

type vmContext struct{ types.DefaultVMContext }

func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{} }

type httpContext struct{ types.DefaultHttpContext }

func (*httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	level, err := abi.GetLogLevel()
	abi.LogInfof("log level %v %v", level, err)
	results := []error{err}
	note := func(err error) { results = append(results, err) }

	_, err = abi.GetProperty([]string{"plugin_root_id"})
	note(err)
	note(abi.SetProperty([]string{"pdroute"}, []byte("x")))
	_, err = abi.GetPropertyMap([]string{"request", "headers"})
	note(err)
	_, err = abi.GetVMConfiguration()
	note(err)
	_, err = abi.GetPluginConfiguration()
	note(err)

	_, err = abi.GetHttpRequestHeaders()
	note(err)
	_, err = abi.GetHttpRequestHeader(":path")
	note(err)
	note(abi.AddHttpRequestHeader("x-a", "1"))
	note(abi.ReplaceHttpRequestHeader("x-a", "2"))
	note(abi.RemoveHttpRequestHeader("x-a"))
	note(abi.ReplaceHttpRequestHeaders([][2]string{{":path", "/"}}))
	_, err = abi.GetHttpRequestBody(0, 10)
	note(err)
	note(abi.AppendHttpRequestBody([]byte("a")))
	note(abi.PrependHttpRequestBody([]byte("p")))
	note(abi.ReplaceHttpRequestBody([]byte("r")))

	note(abi.ResumeHttpRequest())
	note(abi.ResumeHttpResponse())
	note(abi.CloseHttpRequest())
	note(abi.CloseHttpResponse())
	note(abi.SendHttpResponse(503, nil, []byte("no"), -1))

	_, err = abi.DispatchHttpCall("cluster", [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}},
		nil, nil, 100, func(int, int, int) {
			_, err := abi.GetHttpCallResponseHeaders()
			abi.LogInfof("call headers %v", err)
			_, err = abi.GetHttpCallResponseBody(0, 10)
			abi.LogInfof("call body %v", err)
			_, err = abi.GetHttpCallResponseTrailers()
			abi.LogInfof("call trailers %v", err)
		})
	note(err)
	code, msg, err := abi.GetStatus()
	abi.LogInfof("status %d %q", code, msg)
	note(err)

	_, cas, err := abi.GetSharedData("k")
	note(err)
	note(abi.SetSharedData("k", []byte("v"), cas))
	q, err := abi.RegisterSharedQueue("q")
	note(err)
	_, err = abi.ResolveSharedQueue("", "q")
	note(err)
	note(abi.EnqueueSharedQueue(q, []byte("item")))
	_, err = abi.DequeueSharedQueue(q)
	note(err)

	note(abi.SetTickPeriodMilliSeconds(0))
	note(abi.SetEffectiveContext(1))
	abi.PluginDone()

	counter := abi.DefineCounterMetric("allcalls_counter")
	counter.Increment(1)
	gauge := abi.DefineGaugeMetric("allcalls_gauge")
	gauge.Add(-1)
	histogram := abi.DefineHistogramMetric("allcalls_histogram")
	histogram.Record(5)
	abi.LogDebugf("metrics %d %d %d", counter.Value(), gauge.Value(), histogram.Value())

	abi.LogTrace("trace")
	abi.LogWarn("warn")
	abi.LogError("error")
	abi.LogCritical("critical")
	abi.LogInfof("results %v", results)
	return types.ActionContinue
}
