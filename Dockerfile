# A coordinator node. Build: docker build -t coordinator .
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY app ./app
COPY storage ./storage
COPY api ./api
COPY migrations ./migrations
COPY cli ./cli
RUN pip install --no-cache-dir .
ENV COORD_KAFKA_LISTEN=0.0.0.0:9092 \
    COORD_ADMIN_LISTEN=0.0.0.0:8080
EXPOSE 9092 8080
HEALTHCHECK --interval=5s --timeout=2s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
ENTRYPOINT ["coordinator"]
CMD ["serve"]
