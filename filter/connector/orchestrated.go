package connector

import (
	"bytes"

	"github.com/pdroute/pdroute/filter/config"
)

// OrchestratedDecode builds the decode body of the orchestrated mode
// (production-stack): as NIXLDecode, but remote_host in the params is
// overwritten with the prefill endpoint's host (the engine may report an
// address the decoder cannot reach), every other param kept verbatim. When
// prefillAnswer is not nil (orchestrated.attach_prefill_response) the whole
// prefill answer is attached as disagg_prefill_resp. kvParams is
// PrefillAnswer.KVParams and prefillAnswer the body ParsePrefillAnswer
// accepted (both are spliced in as they are); an endpoint without Host keeps
// the engine's remote_host.
func OrchestratedDecode(r Request, kvParams []byte, prefill *config.Endpoint, prefillAnswer []byte) (BodyEdit, error) {
	params, err := ParseObject(kvParams)
	if err != nil {
		return BodyEdit{}, err
	}
	edits := make([]Edit, 0, 2)
	if prefill.Host != "" {
		kvParams = params.Build(SetString("remote_host", prefill.Host))
	}
	edits = append(edits, Set("kv_transfer_params", kvParams))
	if prefillAnswer != nil {
		edits = append(edits, Set("disagg_prefill_resp", bytes.TrimSpace(prefillAnswer)))
	}
	return r.Body.Rewrite(edits...), nil
}
