# podkeeper image: the static release binary alone, running as non-root.
#
# `just image` builds it: it runs `just static` (glibc with crt-static, a
# self-contained binary) and uses a build context holding only that binary,
# so nothing is pulled. There is no shell and no libc in the image.
# Dockerfile.from-source builds the same image from a Rust base image, for
# machines that can pull one.
FROM scratch
COPY podkeeper /podkeeper
USER 65532:65532
ENTRYPOINT ["/podkeeper"]
CMD ["run", "--leader-elect"]
