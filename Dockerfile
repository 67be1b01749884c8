# One image for the simulator, the Locust master and the workers.
# BASE_IMAGE: any image with python3 (>= 3.10) and pip; CI builds one from Debian's packages
# where no registry can be reached (.ci/docker-base).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tpot_locust ./tpot_locust
RUN python3 -m pip install --no-cache-dir .
COPY locustfiles ./locustfiles
COPY scenarios ./scenarios
EXPOSE 8000 8089 5557
CMD ["tpot-locust", "--help"]
