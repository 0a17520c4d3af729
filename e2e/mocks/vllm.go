package mocks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// nixlParams is the part of kv_transfer_params vLLM's NixlConnector reads.
type nixlParams struct {
	DoRemoteDecode  bool            `json:"do_remote_decode"`
	DoRemotePrefill bool            `json:"do_remote_prefill"`
	RemoteEngineID  *string         `json:"remote_engine_id"`
	RemoteRequestID *string         `json:"remote_request_id"`
	RemoteHost      *string         `json:"remote_host"`
	RemotePort      *int            `json:"remote_port"`
	RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
}

// parseNixlParams decodes kv_transfer_params; ok is false when absent or malformed.
func parseNixlParams(raw json.RawMessage) (p nixlParams, ok bool) {
	if raw == nil {
		return p, false
	}
	return p, json.Unmarshal(raw, &p) == nil
}

// complete reports whether a decoder can pull with these params: the connector needs
// engine id, request id, host and port, else it recomputes ("Got invalid
// KVTransferParams").
func (p nixlParams) complete() bool {
	return p.RemoteEngineID != nil && *p.RemoteEngineID != "" &&
		p.RemoteRequestID != nil && *p.RemoteRequestID != "" &&
		p.RemoteHost != nil && *p.RemoteHost != "" &&
		p.RemotePort != nil && *p.RemotePort > 0 && *p.RemotePort < 65536
}

// blockIDs flattens remote_block_ids: a list of ints, or a list of lists (one per
// KV-cache group, newer vLLM).
func blockIDs(raw json.RawMessage) ([]int, bool) {
	var flat []int
	if json.Unmarshal(raw, &flat) == nil {
		return flat, true
	}
	var groups [][]int
	if json.Unmarshal(raw, &groups) != nil {
		return nil, false
	}
	return slices.Concat(groups...), true
}

// nixlPrefillParams is the kv_transfer_params a vLLM prefiller answers, in vLLM's
// key order. The pointer fields are the newer (grouped) version's extra keys.
type nixlPrefillParams struct {
	DoRemotePrefill        bool             `json:"do_remote_prefill"`
	DoRemoteDecode         bool             `json:"do_remote_decode"`
	RemoteBlockIDs         any              `json:"remote_block_ids"`
	RemoteEngineID         string           `json:"remote_engine_id"`
	RemoteRequestID        string           `json:"remote_request_id"`
	RemoteHost             string           `json:"remote_host"`
	RemotePort             int              `json:"remote_port"`
	TPSize                 int              `json:"tp_size"`
	DCPSize                *int             `json:"dcp_size,omitempty"`
	PPSize                 *int             `json:"pp_size,omitempty"`
	RemoteNumTokens        *int             `json:"remote_num_tokens,omitempty"`
	RemoteBlocksExpiryTime *json.RawMessage `json:"remote_blocks_expiry_time,omitempty"`
	TransferMode           string           `json:"transfer_mode,omitempty"`
}

// serveVLLM serves a request at a vLLM + NixlConnector engine.
func (s *Server) serveVLLM(w http.ResponseWriter, r *http.Request, e *RecordedRequest, req *request, kind string, p plan) {
	ctx := r.Context()
	rp := s.newReply(r, req, p)
	if kind == kindPrefill {
		s.checkPrefillContract(req)
		if len(req.prompts) != 1 {
			s.answerError(w, e, req.ep, badRequest("kv_transfer_params: batched prompts are not supported"))
			return
		}
		s.serve(ctx, w, e, req, rp, false, false, func() error {
			if p.missingParams {
				return nil
			}
			params := s.grantLease(rp.id, req.prompts[0])
			rp.kvParams, _ = json.Marshal(params)
			return nil
		})
		return
	}
	rp.kv, rp.kvReason = KVRecomputed, s.nixlPull(req)
	if rp.kvReason == "" {
		rp.kv = KVTransferred
	}
	s.noteKV(e, rp)
	s.serve(ctx, w, e, req, rp, rp.kv == KVTransferred, false, nil)
}

// grantLease holds prompt's blocks for a decoder and returns the params that let it
// pull them.
func (s *Server) grantLease(id string, prompt []int) nixlPrefillParams {
	// vLLM's internal request id carries a random suffix (vLLM PR #27987), so the
	// decoder must use remote_request_id rather than X-Request-Id.
	internalID := id + "-" + randomHex(4)
	blocks := s.leases.grant(internalID, prompt, s.cfg.BlockSize)
	host, portStr, _ := net.SplitHostPort(s.addrs.SideChannel)
	port, _ := strconv.Atoi(portStr)
	params := nixlPrefillParams{
		DoRemotePrefill: true,
		RemoteBlockIDs:  blocks,
		RemoteEngineID:  s.cfg.EngineID,
		RemoteRequestID: internalID,
		RemoteHost:      host,
		RemotePort:      port,
		TPSize:          s.cfg.TPSize,
	}
	if s.cfg.GroupedBlockIDs {
		one, n := 1, len(prompt)
		null := json.RawMessage("null")
		params.RemoteBlockIDs = [][]int{blocks}
		params.DCPSize, params.PPSize, params.RemoteNumTokens = &one, &one, &n
		params.RemoteBlocksExpiryTime = &null
		params.TransferMode = "pull"
	}
	return params
}

// pullRequest and pullResponse are the mock's side-channel protocol (standing in for
// the NIXL handshake and RDMA read): the decoder names the blocks, the prefiller
// answers what they hold and frees them.
type pullRequest struct {
	EngineID  string `json:"engine_id"`
	RequestID string `json:"request_id"`
	BlockIDs  []int  `json:"block_ids"`
}

type pullResponse struct {
	PromptHash string `json:"prompt_hash"`
	NumTokens  int    `json:"num_tokens"`
}

// nixlPull tries to pull the prompt's KV the decode request's params point at. It
// returns "" when the KV was transferred, else why the decoder recomputes.
func (s *Server) nixlPull(req *request) (reason string) {
	params, ok := parseNixlParams(req.kv)
	switch {
	case req.kv == nil || (ok && !params.DoRemotePrefill):
		return "no_params"
	case !ok || !params.complete() || len(req.prompts) != 1:
		return "invalid_params"
	}
	if !s.cfg.Role.decodes() {
		s.counters.inc("misrouted")
	}
	blocks, ok := blockIDs(params.RemoteBlockIDs)
	if !ok || len(blocks) == 0 {
		return "invalid_params"
	}
	body, _ := json.Marshal(pullRequest{EngineID: *params.RemoteEngineID, RequestID: *params.RemoteRequestID, BlockIDs: blocks})
	url := "http://" + hostPort(*params.RemoteHost, *params.RemotePort) + "/nixl/pull"
	resp, err := s.client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		s.cfg.Logger.Printf("nixl pull from %s: %v", url, err)
		return "pull_failed"
	}
	defer resp.Body.Close()
	var pr pullResponse
	switch {
	case resp.StatusCode == http.StatusGone:
		return "expired"
	case resp.StatusCode != http.StatusOK:
		return "pull_failed"
	case json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&pr) != nil:
		return "pull_failed"
	case pr.PromptHash != hashString(promptHash(req.prompts[0])):
		return "mismatch"
	}
	return ""
}

func hashString(h uint64) string { return fmt.Sprintf("%016x", h) }

// sideChannelHandler serves POST /nixl/pull on the prefiller's side channel.
func (s *Server) sideChannelHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /nixl/pull", func(w http.ResponseWriter, r *http.Request) {
		s.counters.inc("requests.nixl_pull")
		var pr pullRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&pr); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad pull request"})
			return
		}
		status, l := s.leases.pull(pr, s.cfg.EngineID)
		if status != http.StatusOK {
			writeJSON(w, status, map[string]string{"error": http.StatusText(status)})
			return
		}
		writeJSON(w, http.StatusOK, pullResponse{PromptHash: hashString(l.hash), NumTokens: l.tokens})
	})
	return mux
}

// lease is a prompt's blocks held by a prefiller until a decoder pulls them.
type lease struct {
	blocks  []int
	hash    uint64
	tokens  int
	expires time.Time
}

// leaseTable holds a vLLM prefiller's leases by remote_request_id.
type leaseTable struct {
	mu        sync.Mutex
	m         map[string]*lease
	expired   map[string]bool // ids that expired, so a late pull gets 410 (bounded)
	nextBlock int
	ttl       time.Duration
	counters  *counters
}

// maxExpiredIDs bounds the remembered expired lease ids.
const maxExpiredIDs = 4096

func (t *leaseTable) grant(id string, prompt []int, blockSize int) []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.purgeLocked(time.Now())
	if t.m == nil {
		t.m = map[string]*lease{}
	}
	n := max((len(prompt)+blockSize-1)/blockSize, 1)
	blocks := make([]int, n)
	for i := range blocks {
		blocks[i] = t.nextBlock
		t.nextBlock++
	}
	t.m[id] = &lease{blocks: blocks, hash: promptHash(prompt), tokens: len(prompt), expires: time.Now().Add(t.ttl)}
	return blocks
}

// pull hands a lease to the decoder that names it and frees it. The status is 200,
// 404 (unknown id), 409 (other engine or other blocks: the lease stays) or 410
// (expired).
func (t *leaseTable) pull(pr pullRequest, engineID string) (int, *lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.purgeLocked(time.Now())
	l, ok := t.m[pr.RequestID]
	switch {
	case !ok && t.expired[pr.RequestID]:
		return http.StatusGone, nil
	case !ok:
		return http.StatusNotFound, nil
	case pr.EngineID != engineID || !slices.Equal(pr.BlockIDs, l.blocks):
		return http.StatusConflict, nil
	}
	delete(t.m, pr.RequestID)
	t.counters.inc("leases.released")
	return http.StatusOK, l
}

func (t *leaseTable) purgeLocked(now time.Time) {
	for id, l := range t.m {
		if now.After(l.expires) {
			delete(t.m, id)
			if t.expired == nil || len(t.expired) >= maxExpiredIDs {
				t.expired = map[string]bool{}
			}
			t.expired[id] = true
			t.counters.inc("leases.expired")
		}
	}
}

// held is the number of live leases; blocks is their block count.
func (t *leaseTable) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.purgeLocked(time.Now())
	return len(t.m)
}

func (t *leaseTable) blocks() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.purgeLocked(time.Now())
	n := 0
	for _, l := range t.m {
		n += len(l.blocks)
	}
	return n
}

func (t *leaseTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m, t.expired = nil, nil
}
