package tokenest

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"

	"github.com/pdroute/pdroute/tokenest/internal/jsonraw"
)

// Media rules of the Default method. An image's or a clip's real cost
// depends on the model (its vision or audio encoder) and on the medium's
// size, which the router cannot know without decoding it; these rules aim
// at the usual case so that media push a request towards disaggregation
// instead of being ignored. Chars4 ignores media, as PR #890 does.
const (
	// ImageTokens is the cost of an image part: OpenAI's high-detail price of
	// a 1024×1024 image (85 + 4 tiles × 170), which also sits between
	// LLaVA-1.5's 576 and Qwen2-VL's ~1300 tokens for that size.
	ImageTokens = 765
	// ImageTokensLow is the cost of an image part with detail "low".
	ImageTokensLow = 85
	// AudioTokensPerSecond prices audio by duration: Whisper-style encoders
	// (Qwen2-Audio, Ultravox) emit 25 tokens per second after pooling.
	AudioTokensPerSecond = 25
	// AudioDefaultSeconds is the duration assumed when it cannot be read
	// (an audio URL, or data without a WAV header): 30 s, Whisper's window.
	AudioDefaultSeconds = 30
	// OtherMediaTokens is the cost of a video, file or unknown part: one
	// image's worth, a floor rather than a measure.
	OtherMediaTokens = ImageTokens
)

// imageTokens prices an image part by its detail setting.
func imageTokens(p []byte) int {
	detail := jsonraw.Field(p, "detail") // Responses input_image
	if u := jsonraw.Field(p, "image_url"); jsonraw.Kind(u) == jsonraw.Object {
		detail = jsonraw.Field(u, "detail")
	}
	if jsonraw.KeyIs(jsonraw.Str(detail), "low") {
		return ImageTokensLow
	}
	return ImageTokens
}

// compressedBytesPerSecond is the data rate assumed for audio that is not
// WAV: 128 kbit/s MP3.
const compressedBytesPerSecond = 16000

// audioTokens prices an input_audio part by its duration: the base64 data's
// decoded size over the WAV header's byte rate (or 128 kbit/s for other
// formats).
func audioTokens(p []byte) int {
	data := jsonraw.Str(jsonraw.Field(jsonraw.Field(p, "input_audio"), "data"))
	if len(data) == 0 {
		return AudioDefaultSeconds * AudioTokensPerSecond
	}
	if i := bytes.IndexByte(data, ','); i >= 0 && i < 64 && len(data) > 5 && string(data[:5]) == "data:" {
		data = data[i+1:]
	}
	rate := wavByteRate(data)
	if rate == 0 {
		rate = compressedBytesPerSecond
	}
	size := len(data) / 4 * 3
	return (size*AudioTokensPerSecond + rate - 1) / rate
}

// wavByteRate reads the byte rate from a base64 WAV header, or returns 0.
func wavByteRate(b64 []byte) int {
	if len(b64) < 48 {
		return 0
	}
	var h [36]byte
	if _, err := base64.StdEncoding.Decode(h[:], b64[:48]); err != nil {
		return 0
	}
	if string(h[0:4]) != "RIFF" || string(h[8:12]) != "WAVE" || string(h[12:16]) != "fmt " {
		return 0
	}
	return int(binary.LittleEndian.Uint32(h[28:32]))
}
