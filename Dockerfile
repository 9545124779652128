# podkeeper image: the static release binary alone, running as non-root.
#
# `just image` builds it: it runs `just static` (glibc with crt-static, a
# self-contained binary) and uses a build context holding only that binary,
# so nothing is pulled. There is no shell and no libc in the image. The
# build machine's CA bundle (Debian's ca-certificates) is the trust store of
# the operator's HTTPS clients other than the API server's (backups to an
# S3 endpoint): the HTTP client reads it at the standard path, and refuses
# to start without one.
# Dockerfile.from-source builds the same image from a Rust base image, for
# machines that can pull one.
FROM scratch
COPY podkeeper /podkeeper
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/podkeeper"]
CMD ["run", "--leader-elect"]
