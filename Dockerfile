# One image for every Berth component; the compose file picks the command.
FROM python:3.11-slim
WORKDIR /opt/berth
COPY pyproject.toml README.md ./
COPY berth ./berth
COPY stack ./stack
COPY catalog ./catalog
COPY workflows ./workflows
COPY activities ./activities
COPY gateway ./gateway
COPY cli ./cli
COPY server ./server
COPY control ./control
COPY node ./node
COPY simulator ./simulator
COPY console ./console
COPY rank ./rank
RUN pip install --no-cache-dir -e ".[postgres]"
ENV BERTH_STATE_DIR=/var/lib/berth
ENTRYPOINT ["berth"]
