package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(`{"prompt":[1,2,3,4,5]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	chat := `{"messages":[{"role":"user","content":"Hello there, how are you today?"}]}`
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{
			name:  "chat from stdin with defaults",
			stdin: chat,
			wantStdout: `{"estimate":16,"exact":false,"method":"default","breakdown":` +
				`{"text":8,"token_ids":0,"images":0,"audio":0,"other_media":0,"tools":0,"overhead":8}}` + "\n",
		},
		{
			name:  "chars4",
			args:  []string{"-method", "chars4"},
			stdin: chat,
			wantStdout: `{"estimate":7,"exact":false,"method":"chars4","breakdown":` +
				`{"text":7,"token_ids":0,"images":0,"audio":0,"other_media":0,"tools":0,"overhead":0}}` + "\n",
		},
		{
			name: "token ids from a file",
			args: []string{"-path", "/v1/completions", file},
			wantStdout: `{"estimate":5,"exact":true,"method":"default","breakdown":` +
				`{"text":0,"token_ids":5,"images":0,"audio":0,"other_media":0,"tools":0,"overhead":0}}` + "\n",
		},
		{name: "not JSON", stdin: `{"messages":`, wantCode: 1, wantStderr: "tokest: tokenest: body is not a JSON object\n"},
		{name: "wrong shape", stdin: `{"messages":"hi"}`, wantCode: 1, wantStderr: "tokest: tokenest: messages: want an array of messages\n"},
		{name: "unknown path", args: []string{"-path", "/v1/embeddings"}, stdin: chat, wantCode: 1, wantStderr: "tokest: tokenest: no request shape for this path\n"},
		{name: "unknown method", args: []string{"-method", "words"}, stdin: chat, wantCode: 1, wantStderr: "tokenest: unknown method \"words\""},
		{name: "missing file", args: []string{"/nonexistent/body.json"}, wantCode: 1, wantStderr: "no such file"},
		{name: "two files", args: []string{file, file}, wantCode: 1, wantStderr: "tokest: at most one file argument\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(tt.stdin), &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if stdout.String() != tt.wantStdout {
				t.Errorf("stdout %q\nwant   %q", stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) || (tt.wantStderr == "") != (stderr.Len() == 0) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
			if n := strings.Count(stderr.String(), "\n"); n > 1 {
				t.Errorf("stderr has %d lines, want one", n)
			}
		})
	}
}
