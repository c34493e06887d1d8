// Ed25519 through OpenSSL's EVP interface; key files written 0600, made once under a lock.
#include "receipt/signing_key.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "base/env.h"
#include "base/file.h"
#include "base/sha256.h"

namespace power::receipt {

struct SigningKey::Pkey {
  EVP_PKEY* p = nullptr;
  ~Pkey() { EVP_PKEY_free(p); }
};

namespace {

constexpr const char* kPrivateName = "receipt-ed25519.key";
constexpr const char* kPublicName = "receipt-ed25519.pub";
constexpr const char* kLockName = "receipt-ed25519.lock";

struct MdCtx {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  ~MdCtx() { EVP_MD_CTX_free(c); }
};

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

Status make_private_dir(const std::string& dir) {
  // Each component; the last one (the keys directory itself) is made 0700.
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), pos == dir.size() ? 0700 : 0755) != 0 && errno != EEXIST) {
      return Status(StatusCode::kIo, "cannot create the keys directory")
          .with("path", part)
          .with("error", std::strerror(errno));
    }
  }
  return Status();
}

// Writes `text` to dir/name with mode 0600: a temporary file, fsync, rename, directory fsync.
Status write_private_file(const std::string& dir, const std::string& name, std::string_view text) {
  std::string tmp = dir + "/." + name + ".XXXXXX";
  UniqueFd fd(::mkstemp(tmp.data()));  // mkstemp creates with 0600
  if (!fd.valid()) {
    return Status(StatusCode::kIo, "cannot create a key file")
        .with("path", tmp)
        .with("error", std::strerror(errno));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::unlink(tmp.c_str());
      return Status(StatusCode::kIo, "cannot write a key file").with("path", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd.get(), 0600) != 0 || ::fsync(fd.get()) != 0) {
    ::unlink(tmp.c_str());
    return Status(StatusCode::kIo, "cannot sync a key file").with("path", tmp);
  }
  fd.reset();
  Status st = rename_durable(tmp, dir + "/" + name);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

}  // namespace

SigningKey::~SigningKey() = default;

std::string SigningKey::default_dir() {
  return power_home() + "/keys";
}

Status decode_hex(std::string_view hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) {
    return Status(StatusCode::kInvalidArgument, "wrong hex length")
        .with("expected_chars", 2 * n)
        .with("actual_chars", hex.size());
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status(StatusCode::kInvalidArgument, "not hex");
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return Status();
}

Result<PublicKey> parse_public_key_hex(std::string_view hex) {
  PublicKey k{};
  POWER_RETURN_IF_ERROR(decode_hex(trim(hex), k.data(), k.size()));
  return k;
}

Result<std::unique_ptr<SigningKey>> SigningKey::from_seed(const std::array<uint8_t, 32>& seed) {
  std::unique_ptr<SigningKey> key(new SigningKey());
  key->pkey_ = std::make_unique<Pkey>();
  key->pkey_->p = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed.data(), seed.size());
  if (key->pkey_->p == nullptr) {
    return Status(StatusCode::kInternal, "OpenSSL refused the Ed25519 private key");
  }
  size_t len = key->public_key_.size();
  if (EVP_PKEY_get_raw_public_key(key->pkey_->p, key->public_key_.data(), &len) != 1 ||
      len != key->public_key_.size()) {
    return Status(StatusCode::kInternal, "cannot derive the Ed25519 public key");
  }
  return key;
}

Result<std::unique_ptr<SigningKey>> SigningKey::load_or_create(const std::string& dir) {
  if (dir.empty()) return Status(StatusCode::kInvalidArgument, "empty keys directory");
  POWER_RETURN_IF_ERROR(make_private_dir(dir));
  POWER_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(dir + "/" + kLockName));
  const std::string priv_path = dir + "/" + kPrivateName;
  struct stat sb {};
  std::array<uint8_t, 32> seed{};
  if (::stat(priv_path.c_str(), &sb) == 0) {
    if ((sb.st_mode & 077) != 0) {
      return Status(StatusCode::kIntegrity,
                    "the receipt key file is readable by others; chmod 600 it")
          .with("path", priv_path)
          .with("mode", fmt::format("{:o}", sb.st_mode & 0777));
    }
    POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(priv_path));
    Status st = decode_hex(trim(text), seed.data(), seed.size());
    if (!st.ok()) {
      return Status(StatusCode::kCorrupt, "the receipt key file is not 64 hex digits")
          .with("path", priv_path);
    }
  } else if (errno == ENOENT) {
    if (RAND_priv_bytes(seed.data(), static_cast<int>(seed.size())) != 1) {
      return Status(StatusCode::kInternal, "no randomness for a new key");
    }
    POWER_RETURN_IF_ERROR(
        write_private_file(dir, kPrivateName, to_hex(seed.data(), seed.size()) + "\n"));
  } else {
    return Status(StatusCode::kIo, "cannot read the receipt key file")
        .with("path", priv_path)
        .with("error", std::strerror(errno));
  }
  POWER_ASSIGN_OR_RETURN(auto key, from_seed(seed));
  OPENSSL_cleanse(seed.data(), seed.size());
  // The public half, for people and scripts (`power key show` derives it from the private key).
  const std::string pub_path = dir + "/" + kPublicName;
  auto pub_text = read_file_text(pub_path);
  if (!pub_text.ok() || trim(*pub_text) != key->public_key_hex()) {
    POWER_RETURN_IF_ERROR(write_file_atomic(pub_path, key->public_key_hex() + "\n"));
  }
  return key;
}

std::string SigningKey::public_key_hex() const {
  return to_hex(public_key_.data(), public_key_.size());
}

Result<std::array<uint8_t, 64>> SigningKey::sign(std::string_view message) const {
  MdCtx ctx;
  std::array<uint8_t, 64> sig{};
  size_t len = sig.size();
  if (ctx.c == nullptr || EVP_DigestSignInit(ctx.c, nullptr, nullptr, nullptr, pkey_->p) != 1 ||
      EVP_DigestSign(ctx.c, sig.data(), &len, reinterpret_cast<const uint8_t*>(message.data()),
                     message.size()) != 1 ||
      len != sig.size()) {
    return Status(StatusCode::kInternal, "Ed25519 signing failed");
  }
  return sig;
}

Status verify_signature(const PublicKey& key, std::string_view message,
                        const std::array<uint8_t, 64>& signature) {
  EVP_PKEY* p = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.data(), key.size());
  if (p == nullptr) return Status(StatusCode::kIntegrity, "not an Ed25519 public key");
  MdCtx ctx;
  const int rc = ctx.c == nullptr
                     ? -1
                     : (EVP_DigestVerifyInit(ctx.c, nullptr, nullptr, nullptr, p) == 1
                            ? EVP_DigestVerify(ctx.c, signature.data(), signature.size(),
                                               reinterpret_cast<const uint8_t*>(message.data()),
                                               message.size())
                            : -1);
  EVP_PKEY_free(p);
  if (rc != 1) return Status(StatusCode::kIntegrity, "the Ed25519 signature does not verify");
  return Status();
}

}  // namespace power::receipt
