package connector

import (
	"errors"
	"strconv"
	"strings"

	"github.com/pdroute/pdroute/filter/config"
	"github.com/tidwall/gjson"
)

// maxBatch bounds the bootstrap lists built for one request: n and batch
// sizes come from the client.
const maxBatch = 4096

// ErrBatchTooLarge: a batched request asks for more than 4096 items. The
// plugin answers it with 400.
var ErrBatchTooLarge = errors.New("batch of more than 4096 items")

// SGLang builds the body of the sglang mode, sent to both the prefill and the
// decode endpoint (the decode leg as this BodyEdit of the buffered body, the
// prefill call as its Apply): the sanitised client body
// with bootstrap_host (the prefill endpoint's Host, IPv6 in brackets),
// bootstrap_port (the endpoint's BootstrapPort, or JSON null so the engine
// uses its default) and bootstrap_room (room() masked to [0, 2^63−1]).
//
// A batched request gets one entry per item in three lists, as SGLang's own
// gateway sends them: n > 1 gives n items; otherwise a completion prompt
// that is a list of strings or of token lists, or a /generate text list or
// input_ids list of lists, gives one item per prompt. A list of token ids is
// one prompt.
func SGLang(r Request, prefill *config.Endpoint, room func() uint64) (BodyEdit, error) {
	items, err := batchSize(r)
	if err != nil {
		return BodyEdit{}, err
	}
	host := prefill.Host
	if strings.IndexByte(host, ':') >= 0 {
		host = "[" + host + "]"
	}
	port := jsonNull
	if prefill.BootstrapPort != 0 {
		port = strconv.AppendInt(nil, int64(prefill.BootstrapPort), 10)
	}
	hostJSON := gjson.AppendJSONString(nil, host)
	if items == 0 {
		roomJSON := strconv.AppendUint(nil, room()&(1<<63-1), 10)
		return r.Body.Rewrite(Set("bootstrap_host", hostJSON), Set("bootstrap_port", port), Set("bootstrap_room", roomJSON)), nil
	}
	hosts := repeat(hostJSON, items)
	ports := repeat(port, items)
	rooms := make([]byte, 0, items*20+2)
	rooms = append(rooms, '[')
	for i := 0; i < items; i++ {
		if i > 0 {
			rooms = append(rooms, ',')
		}
		rooms = strconv.AppendUint(rooms, room()&(1<<63-1), 10)
	}
	rooms = append(rooms, ']')
	return r.Body.Rewrite(Set("bootstrap_host", hosts), Set("bootstrap_port", ports), Set("bootstrap_room", rooms)), nil
}

// batchSize returns the number of items of a batched request, or 0 for a
// single one.
func batchSize(r Request) (int, error) {
	if v := r.Body.Get("n"); v.Type == gjson.Number && v.Num > 1 {
		if v.Num > maxBatch {
			return 0, ErrBatchTooLarge
		}
		if v.Num == float64(int(v.Num)) { // a fractional n is the engine's to reject
			return int(v.Num), nil
		}
	}
	var list []byte
	switch r.API {
	case config.APICompletions:
		list = r.Body.Raw("prompt")
	case config.APIGenerate:
		if list = r.Body.Raw("text"); list == nil || list[0] != '[' {
			list = r.Body.Raw("input_ids")
		}
	}
	if len(list) == 0 || list[0] != '[' || isTokenIDs(list) {
		return 0, nil
	}
	n := arrayLen(list, maxBatch)
	if n > maxBatch {
		return 0, ErrBatchTooLarge
	}
	return n, nil
}

// repeat returns a JSON list holding v n times.
func repeat(v []byte, n int) []byte {
	out := make([]byte, 0, n*(len(v)+1)+1)
	out = append(out, '[')
	for i := 0; i < n; i++ {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, v...)
	}
	return append(out, ']')
}
