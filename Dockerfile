# podkeeper image: a static binary on distroless, running as non-root.
# Build: docker build -t podkeeper:dev .   (or `just image`)
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# glibc with crt-static gives a self-contained binary (no libc in the final
# image); `just static` builds the same thing outside Docker.
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target x86_64-unknown-linux-gnu \
 && cp target/x86_64-unknown-linux-gnu/release/podkeeper /podkeeper

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /podkeeper /podkeeper
USER 65532:65532
ENTRYPOINT ["/podkeeper"]
CMD ["run", "--leader-elect"]
