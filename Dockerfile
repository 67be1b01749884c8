# One image for the simulator, the Locust master and the workers.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tpot_locust ./tpot_locust
RUN pip install --no-cache-dir .
COPY locustfiles ./locustfiles
COPY scenarios ./scenarios
EXPOSE 8000 8089 5557
CMD ["tpot-locust", "--help"]
