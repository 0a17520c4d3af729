package connector

import (
	"slices"

	"github.com/pdroute/pdroute/filter/config"
)

// nixlPrefillParams asks vLLM's NixlConnector to keep the prompt's KV blocks
// for a remote decoder (PROTOCOLS §1).
var nixlPrefillParams = []byte(`{"do_remote_decode":true,"do_remote_prefill":false,` +
	`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// NIXLCheck reports whether r can be disaggregated in the nixl and
// orchestrated modes. A batched completion (prompt a list of strings or of
// token-id lists) cannot: vLLM answers a batched prompt carrying
// kv_transfer_params with 400 ("batched prompts are not supported"), while
// the request is valid, and a decoder serves it whole. It returns an
// ErrNotEligible error for it, and nil otherwise.
func NIXLCheck(r Request) error {
	if r.API != config.APICompletions {
		return nil
	}
	if p := r.Body.Raw("prompt"); len(p) > 0 && p[0] == '[' && arrayLen(p, 1) > 0 && !isTokenIDs(p) {
		return notEligible("batched prompt")
	}
	return nil
}

// Disaggregable reports whether mode can disaggregate r, with the reason
// when it cannot (an ErrNotEligible error): such a request goes to a
// decoder, which serves it alone, rather than fail because it was
// disaggregated. The filter and the native proxy both ask it.
func Disaggregable(mode config.Mode, r Request) error {
	switch mode {
	case config.ModeLMCache:
		return LMCacheCheck(r)
	case config.ModeNIXL, config.ModeOrchestrated:
		return NIXLCheck(r)
	}
	return nil // sglang bootstraps every item of a batch (SGLangDecode)
}

// NIXLPrefill builds the prefill body of the nixl and orchestrated modes,
// sent to the same path the client used: the sanitised client body with
// kv_transfer_params asking for remote decode, "stream":false and no
// stream_options (the answer is read whole), one output token —
// max_output_tokens for the Responses API, else max_tokens, plus
// max_completion_tokens when the client set it (vLLM caps chat output with
// max_completion_tokens before max_tokens; adding it to a request that lacks
// it would only put an unknown field into /v1/completions) — and no
// min_tokens or min_completion_tokens, which would contradict one token.
func NIXLPrefill(r Request) []byte { return NIXLPrefillTo(nil, r) }

// NIXLPrefillTo is NIXLPrefill appending to dst (a buffer the caller
// reuses). It is Object.AppendTo with the edits above (nixlPrefillEdits,
// the reference its tests hold it to, byte for byte) written out as one
// pass over the members: it runs for every disaggregated request, and
// one function costs less there than the general editor's several.
func NIXLPrefillTo(dst []byte, r Request) []byte {
	o := r.Body
	limit := r.maxTokensField()
	size := len(nixlPrefillParams) + 64
	for _, m := range o.members {
		size += m.end - m.start + 1
	}
	dst = slices.Grow(dst, size)
	dst = append(dst, '{')
	// Set edits apply at a key's first occurrence; later ones are dropped,
	// as are the deleted keys.
	var kv, stream, max, completion bool
	n := 0
	for _, m := range o.members {
		if m.removed {
			continue
		}
		var v []byte
		switch m.key {
		case "stream_options", "min_tokens", "min_completion_tokens":
			continue
		case "kv_transfer_params":
			if kv {
				continue
			}
			kv, v = true, nixlPrefillParams
		case "stream":
			if stream {
				continue
			}
			stream, v = true, jsonFalse
		case limit:
			if max {
				continue
			}
			max, v = true, jsonOne
		case "max_completion_tokens":
			if completion {
				continue
			}
			completion, v = true, jsonOne
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		if v == nil {
			dst = append(dst, o.src[m.start:m.end]...)
			continue
		}
		dst = append(dst, o.src[m.start:m.keyEnd]...)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	// the members set that were absent, in nixlPrefillEdits' order
	if !kv {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `"kv_transfer_params":`...)
		dst = append(dst, nixlPrefillParams...)
	}
	if !stream {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, `"stream":false`...)
	}
	if !max {
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, limit...)
		dst = append(dst, `":1`...)
	}
	return append(dst, '}')
}

// nixlPrefillEdits are the edits NIXLPrefillTo applies to r.
func nixlPrefillEdits(r Request) []Edit {
	edits := []Edit{
		Set("kv_transfer_params", nixlPrefillParams),
		Set("stream", jsonFalse),
		Delete("stream_options"),
		Set(r.maxTokensField(), jsonOne),
		Delete("min_tokens"),
		Delete("min_completion_tokens"),
	}
	if r.Body.Raw("max_completion_tokens") != nil {
		edits = append(edits, Set("max_completion_tokens", jsonOne))
	}
	return edits
}

// NIXLDecode builds the decode body of the nixl mode: the sanitised client
// body (its own stream, token limits and min_tokens) with the prefill
// answer's kv_transfer_params, kvParams, spliced in verbatim. The shape of
// those params changes between vLLM versions, so they are never rebuilt.
// kvParams is PrefillAnswer.KVParams.
func NIXLDecode(r Request, kvParams []byte) BodyEdit {
	return NIXLDecodeTo(nil, r, kvParams)
}

// NIXLDecodeTo is NIXLDecode building the edit's prefix in dst's room.
func NIXLDecodeTo(dst []byte, r Request, kvParams []byte) BodyEdit {
	return r.Body.RewriteTo(dst, Set("kv_transfer_params", kvParams))
}

// NIXLDecodeDetached is NIXLDecodeTo for a Detached r whose DecodeHead is
// 0 — the usual body: no member to replace or drop, so the edit only puts
// kv_transfer_params first — built from the offsets alone, with no bytes of
// the body read back (the same edit, byte for byte). False, and a zero
// edit, for any other r: the caller rebinds it (RebindHead) and uses
// NIXLDecodeTo.
func NIXLDecodeDetached(dst []byte, r Request, kvParams []byte) (BodyEdit, bool) {
	o := r.Body
	if o.src != nil || o.srcLen == 0 || o.head != 0 {
		return BodyEdit{}, false
	}
	drain := o.close
	if len(o.members) > 0 {
		drain = o.members[0].start
	}
	prefix := append(dst[:0], `{"kv_transfer_params":`...)
	prefix = append(prefix, kvParams...)
	if drain != o.close {
		prefix = append(prefix, ',')
	}
	return BodyEdit{Drain: drain, Prefix: prefix}, true
}
